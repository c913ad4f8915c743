"""sd_notify against a real AF_UNIX datagram socket, as systemd would receive it (a path, or an abstract
name), and against one systemd does not read."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from watchdog.surface.notify import Notifier


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(5)
    yield sock, path
    sock.close()


def test_messages_reach_the_socket(
    notify_socket: tuple[socket.socket, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sock, path = notify_socket
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    notifier = Notifier()
    notifier.ready("watching   3 keys\nidle")
    assert sock.recv(4096).decode() == "READY=1\nSTATUS=watching 3 keys idle"
    notifier.status("draining: 2 holders")
    assert sock.recv(4096).decode() == "STATUS=draining: 2 holders"
    notifier.watchdog()
    assert sock.recv(4096).decode() == "WATCHDOG=1"
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    notifier.reloading("reloading the configuration")
    reloading, usec, status = sock.recv(4096).decode().split("\n")
    assert (reloading, status) == ("RELOADING=1", "STATUS=reloading the configuration")
    assert usec.startswith("MONOTONIC_USEC=")  # systemd 253's Type=notify-reload requires it
    assert before <= int(usec.partition("=")[2]) <= time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    notifier.stopping()
    assert sock.recv(4096).decode() == "STOPPING=1\nSTATUS=stopping"


def test_an_abstract_socket_is_reached_too() -> None:
    name = f"tpuwd-test-notify-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        Notifier(environ={"NOTIFY_SOCKET": f"@{name}"}).status("idle")
        assert sock.recv(4096) == b"STATUS=idle"


CHILD = """
import logging
from watchdog.surface.notify import Notifier
logging.basicConfig(level=logging.WARNING, format="%(message)s")
notifier = Notifier()
notifier.ready("watching")
notifier.status("still watching")
print("returned", flush=True)
"""


def test_a_manager_that_does_not_read_never_blocks_the_caller(
    notify_socket: tuple[socket.socket, str],
) -> None:
    """A hung PID 1, its queue full: libsystemd's sd_notify blocked until it read again, and systemd-python
    holds the GIL meanwhile, so the whole daemon stopped (hence a child process here: a thread could not
    even time out). Now the message is dropped at once, said once, and the next one goes through."""
    sock, path = notify_socket
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as filler:
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            while True:
                filler.sendto(b"x" * 1024, path)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        env={**os.environ, "NOTIFY_SOCKET": path},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = child.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        pytest.fail("sd_notify blocked on a full queue")
    assert out == "returned\n"
    [warning] = [line for line in err.splitlines() if "NOTIFY_SOCKET" in line]
    assert "systemd is not reading it" in warning
    sock.setblocking(False)
    with contextlib.suppress(BlockingIOError):
        while True:
            sock.recv(4096)  # systemd reads again
    sock.settimeout(5)
    Notifier(environ={"NOTIFY_SOCKET": path}).status("draining")
    assert sock.recv(4096) == b"STATUS=draining"


def test_no_notify_socket_is_a_no_op() -> None:
    notifier = Notifier(environ={})
    assert not notifier.enabled
    notifier.ready("x")  # nothing to send to, nothing raised
    assert notifier.watchdog_interval is None


def test_a_bad_notify_socket_warns_once_and_never_raises(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # systemd-python reads NOTIFY_SOCKET from the process environment itself.
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "missing.sock"))
    notifier = Notifier()
    with caplog.at_level(logging.WARNING):
        notifier.ready("a")
        notifier.status("b")
    warnings = [r for r in caplog.records if "NOTIFY_SOCKET" in r.getMessage()]
    assert len(warnings) == 1


def test_watchdog_interval_is_half_the_timeout_and_only_for_this_pid() -> None:
    mine = {"WATCHDOG_USEC": "20000000", "WATCHDOG_PID": str(os.getpid())}
    assert Notifier(environ=mine).watchdog_interval == 10.0
    assert Notifier(environ={"WATCHDOG_USEC": "20000000"}).watchdog_interval == 10.0
    assert Notifier(environ={**mine, "WATCHDOG_PID": "1"}).watchdog_interval is None
    assert Notifier(environ={"WATCHDOG_USEC": "0"}).watchdog_interval is None
