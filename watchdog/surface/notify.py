"""Telling systemd how the daemon is doing (sd_notify): READY, STATUS, WATCHDOG pings, RELOADING, STOPPING.

Without NOTIFY_SOCKET (not under systemd, or not Type=notify) every call is a no-op. A NOTIFY_SOCKET that
cannot be reached is worth one warning, never a crash: the daemon's job matters more than its bookkeeping.

The loop calls it, so a message never waits: it is sent with sd_notify(3)'s own protocol (one datagram to the
socket), without blocking. libsystemd's sd_notify blocks while the manager's receive queue is full (a hung or
swamped PID 1), and systemd-python holds the GIL meanwhile: every thread of the daemon stops, no event is
heard and no signal sent until PID 1 reads again. A message that finds the queue full is dropped, as a STATUS=
is replaced by the next anyway (READY=1 too: systemd not reading it cannot start anything either). Addresses
other than a path or an abstract socket (vsock:...) go through libsystemd.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)

Sender = Callable[[str], bool]


def _systemd_sender(address: str) -> Sender:
    if not address.startswith(("/", "@")):
        import systemd.daemon as daemon

        def through_libsystemd(message: str) -> bool:
            return bool(daemon.notify(message))

        return through_libsystemd
    target = "\0" + address[1:] if address.startswith("@") else address  # "@": the abstract namespace

    def send(message: str) -> bool:
        """A socket per message, as libsystemd does: nothing held open between them."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            try:
                sock.sendto(message.encode(), socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL, target)
            except BlockingIOError:
                return False  # the manager's queue is full: it is not reading
        return True

    return send


class Notifier:
    """sd_notify with the failure modes absorbed; `watchdog_interval` is half of WATCHDOG_USEC, or None."""

    def __init__(self, environ: Mapping[str, str] | None = None, sender: Sender | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        self.enabled = bool(address)
        self._send = sender if sender is not None else (_systemd_sender(address) if address else None)
        self._warned = False
        self.watchdog_interval = _watchdog_interval(env)

    def _notify(self, message: str) -> None:
        if not self.enabled or self._send is None:
            return
        try:
            delivered = self._send(message)
            problem = "" if delivered else "not delivered: systemd is not reading it"
        except OSError as error:
            problem = str(error)
        if problem and not self._warned:
            log.warning("cannot notify systemd through NOTIFY_SOCKET (%s); carrying on without it", problem)
            self._warned = True

    def ready(self, status: str) -> None:
        self._notify(f"READY=1\nSTATUS={_one_line(status)}")

    def reloading(self, status: str) -> None:
        """RELOADING=1 until the next READY=1; MONOTONIC_USEC is what systemd 253's Type=notify-reload
        requires (older managers ignore it)."""
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self._notify(f"RELOADING=1\nMONOTONIC_USEC={usec}\nSTATUS={_one_line(status)}")

    def status(self, status: str) -> None:
        self._notify(f"STATUS={_one_line(status)}")

    def watchdog(self) -> None:
        self._notify("WATCHDOG=1")

    def stopping(self, status: str = "stopping") -> None:
        self._notify(f"STOPPING=1\nSTATUS={_one_line(status)}")


def _one_line(text: str) -> str:
    return " ".join(text.split())[:200]


def _watchdog_interval(env: Mapping[str, str]) -> float | None:
    """Half the watchdog timeout, as sd_watchdog_enabled(3) advises; None if off or meant for another PID."""
    usec = env.get("WATCHDOG_USEC", "")
    pid = env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    if pid and pid != str(os.getpid()):
        return None
    return int(usec) / 1_000_000 / 2
