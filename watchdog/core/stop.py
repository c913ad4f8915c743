"""The daemon's one stop: an Event that also does, at once, what must happen the moment it is set.

Waiting threads see `is_set()`/`wait()` as with any Event. What cannot wait for a thread to notice (a
hanging GET that would otherwise last until its timeout, a loop asleep until its next due time) is done by
`on_set` callbacks, in the thread that sets it (the signals relay, or a test), so no thread of its own sits
waiting for the stop just to pass it on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class Stop(threading.Event):
    """`set()` sets the event, then runs each `on_set` callback once, in order. A callback must return at
    once and not raise (each is a non-blocking hand-off: close a socket, ring an eventfd, put on a queue);
    one that raises still leaves the event set and the others run, and its error is raised after them."""

    def __init__(self) -> None:
        super().__init__()
        self._callbacks: list[Callable[[], None]] = []
        self._guard = threading.Lock()

    def on_set(self, callback: Callable[[], None]) -> None:
        """Run `callback` when the stop is set (now, if it is set already)."""
        with self._guard:
            if not self.is_set():
                self._callbacks.append(callback)
                return
        callback()

    def set(self) -> None:
        with self._guard:
            if self.is_set():
                return
            super().set()
            callbacks, self._callbacks = self._callbacks, []
        failed: BaseException | None = None
        for callback in callbacks:
            try:
                callback()
            except Exception as error:  # noqa: BLE001 - the others run first; raised below
                failed = failed or error
        if failed is not None:
            raise failed
