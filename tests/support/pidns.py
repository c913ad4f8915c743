"""A test driver script run in a private PID namespace (unshare): what it starts, a daemon included, can
signal nothing outside it. The driver prints its report as JSON on its last line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

needs_unshare = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")


def run_driver(driver: str, tmp_path: Path, timeout: float = 120) -> dict[str, Any]:
    """Run `driver` (Python source, argv[1] = tmp_path) as PID 1 of a new namespace; its JSON report."""
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", driver, str(tmp_path)],
        capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report
