"""systemd's end of sd_notify, for a test driver: a real datagram socket at the path NOTIFY_SOCKET names,
read until a message says what the driver waits for (READY=1, STATUS=drained, ...)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path


class NotifySocket:
    """Every message read is kept in `messages` with when it came (time.monotonic())."""

    def __init__(self, path: Path, timeout: float = 30.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(timeout)  # a message that never comes fails the driver, never hangs it
        self.messages: list[tuple[float, str]] = []

    def until(self, wanted: str | Callable[[str], bool]) -> str:
        """The next message containing `wanted` (or for which `wanted(message)` is true)."""
        matches = (lambda m: wanted in m) if isinstance(wanted, str) else wanted
        while True:
            message = self.sock.recv(4096).decode()
            self.messages.append((time.monotonic(), message))
            if matches(message):
                return message
