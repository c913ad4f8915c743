"""The entry point: version, usage errors, and that `python -m watchdog` is the same program."""

from __future__ import annotations

import subprocess
import sys

import pytest

from watchdog import __version__
from watchdog.cli import main
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
