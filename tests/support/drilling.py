"""`tpu-watchdog drill` in a private PID namespace (unshare) with holders of its own: the drill's scanner
sees nothing else on this machine, so a rehearsal in a test never signals a process the test did not start.
Its history goes to a state directory under the test's tmp_path (never the host's /var/lib/tpu-watchdog).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

needs_unshare = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")

# PID 1 of the namespace: starts the holders, runs the drill, reports whether each holder is still alive.
# With ANSWER set, the drill's stdin is a terminal (a pty) on which ANSWER was already typed.
DRIVER = r"""
import os, pty, subprocess, sys
from pathlib import Path
from tests.support.workloads import TEST_ALLOW, Child, make_device
device = make_device(Path(sys.argv[1]))
children = [Child(mode, device) for mode in sys.argv[2].split(",") if mode]
for child in children:
    child.wait_ready()
stdin = None
if "ANSWER" in os.environ:
    typed, stdin = pty.openpty()
    os.write(typed, os.environ["ANSWER"].encode() + b"\n")
drill = subprocess.run(
    [sys.executable, "-m", "watchdog", "drill", "--device", str(device), "--allow-number", TEST_ALLOW,
     *sys.argv[3:]], stdin=stdin
)
print("alive:", ",".join(str(c.alive()) for c in children), flush=True)
for child in children:
    child.close()
sys.exit(drill.returncode)
"""


def drill(
    tmp_path: Path, modes: str, *args: str, answer: str | None = None, state_dir: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Drill holders of `modes` (tests/support/workloads.py Child); the history in `state_dir`, by default
    tmp_path/state (made here)."""
    typed = {} if answer is None else {"ANSWER": answer}
    (tmp_path / "none.toml").write_text("# an empty configuration: every default\n")
    if state_dir is None:
        state_dir = tmp_path / "state"
        state_dir.mkdir(mode=0o700, exist_ok=True)
    return subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", DRIVER, str(tmp_path), modes,
         "--config", str(tmp_path / "none.toml"), "--state-dir", str(state_dir), *args],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), **typed},
    )  # fmt: skip
