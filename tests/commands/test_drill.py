"""`tpu-watchdog drill` for real: real holders, real signals, the verdict per process and the exit status.

Each drill runs in a private PID namespace (unshare), with its holders: the drill's scanner sees nothing
else on this machine, so a rehearsal in a test can never signal a process the test did not start.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# PID 1 of the namespace: starts the holders, runs the drill, reports whether each holder is still alive.
DRIVER = r"""
import subprocess, sys
from pathlib import Path
from tests.support.workloads import Child, make_device
device = make_device(Path(sys.argv[1]))
children = [Child(mode, device) for mode in sys.argv[2].split(",") if mode]
for child in children:
    child.wait_ready()
drill = subprocess.run([sys.executable, "-m", "watchdog", "drill", "--device", str(device), *sys.argv[3:]])
print("alive:", ",".join(str(c.alive()) for c in children), flush=True)
for child in children:
    child.close()
sys.exit(drill.returncode)
"""

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")


def drill(tmp_path: Path, modes: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", DRIVER, str(tmp_path), modes,
         "--config", str(tmp_path / "none.toml"), *args],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )  # fmt: skip


@pytest.fixture(autouse=True)
def no_config(tmp_path: Path) -> None:
    (tmp_path / "none.toml").write_text("# an empty configuration: every default\n")


def test_jobs_that_handle_sigterm_pass(tmp_path: Path) -> None:
    done = drill(tmp_path, "handled,slow", "--grace", "20")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("exited in time") == 2
    assert "drain exited" in done.stdout
    assert "alive: False,False" in done.stdout


def test_a_job_without_a_sigterm_handler_is_called_out(tmp_path: Path) -> None:
    done = drill(tmp_path, "default", "--grace", "20")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "DID NOT HANDLE SIGTERM" in done.stdout
    assert "saved no checkpoint" in done.stdout


def test_a_job_that_ignores_sigterm_needs_sigkill(tmp_path: Path) -> None:
    done = drill(tmp_path, "ignore,handled", "--grace", "1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "NEEDED SIGKILL" in done.stdout
    assert "exited in time" in done.stdout
    assert "alive: False,False" in done.stdout


def test_dry_run_sends_nothing(tmp_path: Path) -> None:
    done = drill(tmp_path, "default", "--grace", "1", "--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "would be sent SIGTERM" in done.stdout
    assert "alive: True" in done.stdout


def test_no_holders_is_exit_3(tmp_path: Path) -> None:
    done = drill(tmp_path, "", "--grace", "1")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "nothing to rehearse" in done.stdout


def test_a_bad_configuration_is_exit_78(tmp_path: Path) -> None:
    done = drill(tmp_path, "", "--grace", "-5")
    assert done.returncode == 78, done.stdout + done.stderr
    assert "grace" in done.stderr
