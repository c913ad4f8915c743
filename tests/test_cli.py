"""The entry point: version, usage errors, and that `python -m watchdog` is the same program."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from watchdog import __version__
from watchdog.cli import COMMANDS, main
from watchdog.exitcodes import EXIT_USAGE


def test_version_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"tpu-watchdog {__version__}"


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == EXIT_USAGE
    assert "usage: tpu-watchdog" in capsys.readouterr().err


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["no-such-command"])
    assert exited.value.code == EXIT_USAGE
    assert "invalid choice" in capsys.readouterr().err


def test_python_dash_m_runs_the_same_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "watchdog", "--version"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"tpu-watchdog {__version__}"


# The flags each command's --help lists: only those it reads (status once listed every daemon flag).
DAEMON_FLAGS = {"--config", "--metadata-host", "--device", "--allow-number", "--exclude", "--grace",
                "--preempt-grace", "--on-timeout", "--state-dir", "--listen", "--dry-run", "--log-level",
                "--log-format", "--webhook"}  # fmt: skip
FLAGS = {
    "status": {"--config", "--listen", "--state-dir", "--json"},
    "drill": {
        "--config",
        "--device",
        "--allow-number",
        "--exclude",
        "--grace",
        "--on-timeout",
        "--dry-run",
        "--yes",
        "--state-dir",
    },
    "readiness": {"--config", "--device", "--allow-number", "--exclude", "--json"},
    "history": {"--config", "--state-dir", "--json", "--limit"},
    "run": DAEMON_FLAGS,
    "config": DAEMON_FLAGS | {"--json"},
}


def _help(command: str) -> str:
    """In a child: `main(["run", ...])` blocks SIGTERM, a mask every later child of this process would
    inherit."""
    done = subprocess.run(
        [sys.executable, "-m", "watchdog", command, "--help"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("command", sorted(FLAGS))
def test_help_lists_only_the_flags_the_command_uses(command: str) -> None:
    listed = set(re.findall(r"^\s+(--[a-z-]+)", _help(command), re.M)) - {"--help"}
    assert listed == FLAGS[command]


def test_a_daemon_flag_status_does_not_use_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["status", "--on-timeout", "bogus"])
    assert exited.value.code == EXIT_USAGE  # not 78: it is not a setting status reads
    assert "unrecognized arguments: --on-timeout bogus" in capsys.readouterr().err


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_readme_lists_config_for_every_command_that_reads_it(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A command that reads the daemon's configuration (the metadata host, the device patterns, the state
    dir) takes --config, and the README's command table says so: drill's and readiness's rows once hid it."""
    with pytest.raises(SystemExit) as exited:
        main([name, "--help"])
    assert exited.value.code == 0
    takes = "--config" in capsys.readouterr().out
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    [row] = [line for line in readme.splitlines() if line.startswith(f"| `tpu-watchdog {name} ")]
    command = row.split("|")[1]
    assert takes == ("--config F" in command or "[flags]" in command), command
