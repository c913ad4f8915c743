"""`tpu-watchdog watch` as a user runs it: a real process against the fake, stopped by a real signal."""

from __future__ import annotations

import argparse
import io
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from watchdog.commands import watch as command
from watchdog.core.metadata_values import Preempted
from watchdog.exitcodes import EXIT_CONFIG, EXIT_USAGE
from watchdog.fake.server import FakeMetadataServer, Fault
from watchdog.metadata.errors import ErrorKind, MetadataError
from watchdog.metadata.watch import KeyUnsupported, ValueChanged, WatchFailed

AT = 1795964400.0  # 2026-11-29T15:00:00Z


def test_event_lines() -> None:
    assert (
        command.format_event(ValueChanged("instance/preempted", Preempted(True), AT))
        == "2026-11-29T15:00:00Z instance/preempted TRUE"
    )
    error = MetadataError(ErrorKind.HTTP_5XX, "instance/preempted", "HTTP 503: 'busy'", 503)
    assert command.format_event(WatchFailed("instance/preempted", error, AT)) == (
        "2026-11-29T15:00:00Z instance/preempted error http_5xx: HTTP 503: 'busy' (retrying)"
    )
    assert "unsupported" in command.format_event(KeyUnsupported("instance/upcoming-maintenance", AT))


def test_printer_writes_whole_lines() -> None:
    out = io.StringIO()
    command.LinePrinter(out)(ValueChanged("instance/preempted", Preempted(False), AT))
    assert out.getvalue() == "2026-11-29T15:00:00Z instance/preempted FALSE\n"


def _run(tmp_path: Path, *argv: str, timeout: int = 60) -> int:
    (tmp_path / "empty.toml").write_text("")
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    args = parser.parse_args(["--config", str(tmp_path / "empty.toml"), *argv])
    args.timeout_sec = timeout  # argparse's type=int would refuse 0 itself before run() could say why
    return command.run(args)


def test_a_bad_timeout_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(tmp_path, "--metadata-host", "127.0.0.1:1", timeout=0) == EXIT_USAGE
    assert "tpu-watchdog watch: --timeout-sec must be >= 1" in capsys.readouterr().err


def test_a_bad_metadata_host_is_a_configuration_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(tmp_path, "--metadata-host", "http://x/") == EXIT_CONFIG
    assert "--metadata-host" in capsys.readouterr().err


@pytest.fixture
def fake() -> Iterator[FakeMetadataServer]:
    with FakeMetadataServer(listen="127.0.0.1:0") as server:
        yield server


def _read_until(process: subprocess.Popen[str], needle: str, lines: list[str], timeout: float = 15.0) -> None:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while not any(needle in line for line in lines):
            left = deadline - time.monotonic()
            assert left > 0, f"no line with {needle!r} in {lines}"
            if selector.select(left):
                line = process.stdout.readline()
                assert line, f"watch exited early: {lines}"
                lines.append(line.rstrip("\n"))


def test_watch_prints_changes_and_errors_until_sigterm(fake: FakeMetadataServer, tmp_path: Path) -> None:
    """The server comes from the daemon's configuration (metadata.host), as the daemon's does: the
    environment names another server, which the configuration overrides."""
    fake.add_fault(Fault(kind="status", status=503, path="instance/preempted"))
    config = tmp_path / "config.toml"
    config.write_text(f'[metadata]\nhost = "{fake.address}"\n')
    process = subprocess.Popen(
        [sys.executable, "-m", "watchdog", "watch", "--config", str(config), "--timeout-sec", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": "/usr/bin:/bin", "GCE_METADATA_HOST": "127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"},
    )
    try:
        lines: list[str] = []
        _read_until(process, "instance/maintenance-event NONE", lines)
        _read_until(process, "instance/preempted error http_5xx", lines)
        _read_until(process, "instance/preempted FALSE", lines, timeout=30)
        _read_until(process, "instance/upcoming-maintenance none scheduled", lines)
        fake.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
        _read_until(process, "instance/maintenance-event TERMINATE_ON_HOST_MAINTENANCE", lines)
        assert all(line[:4].isdigit() and line[19] == "Z" for line in lines)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        assert process.stdout is not None
        assert process.stderr is not None
        process.stdout.close()
        stderr = process.stderr.read()
        process.stderr.close()
    assert f"watching http://{fake.address}/" in stderr
