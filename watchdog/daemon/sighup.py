"""The daemon's signals: SIGTERM and SIGINT set `stop`, SIGHUP puts a `ReloadAsked` message in the loop's
inbox, whichever thread the kernel gives the signal to (`relay_signals`).

Stdlib only, so `run` can install them before the heavy imports (a reload during start-up is held).
What a reload does: reload.py.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("tpu-watchdog")


@dataclass(frozen=True)
class ReloadAsked:
    """The loop's inbox message for one SIGHUP."""


class ReloadRequests:
    """SIGHUP -> `ReloadAsked` in the loop's inbox. Asked by the `signals` thread (`relay_signals`), never
    from a signal handler, so it may take a lock; a reload asked before the loop has an inbox (during
    start-up) is held until `forward` gives it one, and a burst asked meanwhile is one reload."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._put: Callable[[ReloadAsked], None] | None = None
        self._held = False

    def ask(self) -> None:
        with self._lock:
            if self._put is None:
                self._held = True
                return
            put = self._put
        put(ReloadAsked())

    def forward(self, put: Callable[[ReloadAsked], None]) -> None:
        """From now on each request goes to `put`; one held since start-up goes now."""
        with self._lock:
            self._put, held, self._held = put, self._held, False
        if held:
            put(ReloadAsked())


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def relay_signals(stop: threading.Event, reloads: ReloadRequests) -> None:
    """From now on SIGTERM/SIGINT set `stop` and SIGHUP asks `reloads`, at once. Call from the main thread.

    Python runs a signal's handler in the main thread only, once that thread runs again, but the kernel
    gives a process's signal to any of its threads that does not block it: the loop thread, asleep in a
    timed wait until its next due time (30 s, idle), would not see a SIGTERM given to a watch's thread
    until that wait ended. The C-level handler writes the signal's number to a pipe
    (`signal.set_wakeup_fd`) whichever thread it runs in; a thread of its own reads the pipe and acts."""
    read, write = os.pipe()
    os.set_blocking(write, False)
    for signum in (*STOP_SIGNALS, signal.SIGHUP):
        signal.signal(signum, lambda *_: None)  # the pipe does the work; the handler keeps the default away
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    threading.Thread(target=_relay, args=(read, stop, reloads), name="signals", daemon=True).start()


def _relay(read: int, stop: threading.Event, reloads: ReloadRequests) -> None:
    while True:  # a daemon thread: it ends with the process
        received = set(os.read(read, 64))
        if received & set(STOP_SIGNALS):
            try:
                stop.set()  # runs the stop's callbacks here (`core/stop.py`)
            except Exception:  # the event is set whatever failed; the relay goes on for SIGHUP
                log.exception("stopping: a step of the stop failed")
        if signal.SIGHUP in received:  # a burst read at once is one reload
            reloads.ask()
