"""Bad usage of every sub-command exits 2 with its usage and no traceback; a bad configuration exits 78 naming
the key. The real CLI."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.bad_input import CLI
from watchdog.cli import COMMANDS

# --- the command line -------------------------------------------------------------------------------
BAD_USAGE = {
    "run": [["--metadata-timeout-sec", "abc"], ["--config"]],
    "status": [["--json=yes"], ["--config"]],
    "history": [["--limit", "x"], ["--limit"]],
    "holders": [["--proc-root"], ["--json=1"]],
    "drill": [["--dry-run=no"], ["--grace"]],
    "readiness": [["--json=yes"], ["--device"]],
    "config": [["--json=x"], ["--device"]],
    "watch": [["--timeout-sec", "soon"], ["--metadata-host"]],
    "fake-metadata": [["--at", "5s"], ["--listen"]],
    "demo": [["--keep=yes"]],
}
CASES = [
    (command, argv) for command, bad in BAD_USAGE.items() for argv in [["--no-such-flag"], ["stray"], *bad]
]


def _cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TPU_WATCHDOG_")}
    return subprocess.run(
        [CLI, *argv], capture_output=True, text=True, timeout=60, check=False, env={**clean, **(env or {})}
    )


def test_every_command_is_covered() -> None:
    listed = _cli("--help").stdout
    assert set(BAD_USAGE) == set(COMMANDS)
    assert all(command in listed for command in COMMANDS)


@pytest.mark.parametrize(("command", "argv"), CASES, ids=[f"{c}:{' '.join(a)}" for c, a in CASES])
def test_bad_usage_exits_2_with_usage_and_no_traceback(command: str, argv: list[str]) -> None:
    done = _cli(command, *argv)
    assert done.returncode == 2, done.stderr
    assert f"usage: tpu-watchdog {command}" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("command", "contents", "argv", "expected"),
    [
        ("config", "[drain]\nmaintenance_grace = -1\n", [], ["drain.maintenance_grace", "negative"]),
        ("run", "[drain]\ngrace = 5\n", [], ["'drain.grace'", "did you mean", "maintenance_grace"]),
        ("run", 'listen = "127.0.0.1:\u00b2"\n', [], ["listen", "port"]),
        ("config", "", ["--exclude", "pid:\u00b2"], ["--exclude", "whole number"]),
        ("run", 'state_dir = "/var/lib/\\u0000"\n', [], ["state_dir", "NUL"]),
    ],
)
def test_bad_configuration_exits_78_naming_the_key(
    tmp_path: Path, command: str, contents: str, argv: list[str], expected: list[str]
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(contents)
    done = _cli(command, "--config", str(path), *argv)
    assert done.returncode == 78, done.stderr
    assert "Traceback" not in done.stderr
    for text in expected:
        assert text in done.stderr
