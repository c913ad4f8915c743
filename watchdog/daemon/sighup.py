"""SIGHUP -> a `ReloadAsked` message in the loop's inbox, with no lock taken in the signal handler.

Stdlib only, so `run` can install the handler before the heavy imports (a reload during start-up is held).
What a reload does: reload.py.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ReloadAsked:
    """The loop's inbox message for one SIGHUP."""


class ReloadRequests:
    """SIGHUP -> `ReloadAsked` in the loop's inbox. The signal handler (`ask`) only writes a byte to a pipe:
    it may interrupt the loop thread while that holds the inbox's lock, so it must take no lock; a thread
    of its own turns each byte into a message."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)

    def ask(self) -> None:
        with contextlib.suppress(BlockingIOError):  # the pipe is full: reloads are asked for already
            os.write(self._write, b"r")

    def forward(self, put: Callable[[ReloadAsked], None]) -> None:
        threading.Thread(target=self._forward, args=(put,), name="reload-requests", daemon=True).start()

    def _forward(self, put: Callable[[ReloadAsked], None]) -> None:
        while os.read(self._read, 64):
            put(ReloadAsked())
