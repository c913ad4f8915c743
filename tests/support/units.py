"""The shipped unit file, and a copy of it whose ExecStart runs this checkout's venv instead of /usr/bin."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "tpu-watchdog.service"
SHIPPED_EXEC_START = "ExecStart=/usr/bin/tpu-watchdog run"
# The console script next to the interpreter running the tests (the venv's, installed editable).
VENV_BINARY = Path(sys.executable).parent / "tpu-watchdog"


def unit_text(extra_args: str = "") -> str:
    """The unit file with only its ExecStart changed: the venv's tpu-watchdog, plus `extra_args`."""
    text = UNIT.read_text()
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith("ExecStart=")]
    assert len(starts) == 1, f"{UNIT} must have exactly one ExecStart= line, has {len(starts)}"
    line = lines[starts[0]].rstrip("\n")
    assert line == SHIPPED_EXEC_START, f"{UNIT}: expected {SHIPPED_EXEC_START!r}, found {line!r}"
    lines[starts[0]] = f"ExecStart={VENV_BINARY} run {extra_args}".rstrip() + "\n"
    return "".join(lines)
