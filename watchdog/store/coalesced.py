"""A job for a thread of its own, run as often as asked but never twice at once: asked while it runs, it runs
once more after, however often it was asked meanwhile. The thread ends when nothing is asked, so an idle
daemon has none. Disk writes use it (the state file's fsyncs, the history's appends): whoever asks never
waits on the disk."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable

log = logging.getLogger("tpu-watchdog")


class Coalesced:
    """`soon()` runs `job` in a thread named `name`; an exception is logged (`what` failed), and the next
    `soon()` runs it again."""

    def __init__(self, job: Callable[[], None], name: str, what: str) -> None:
        self._job, self._name, self._what = job, name, what
        self._lock = threading.Condition()
        self._asked = self._running = False

    def soon(self) -> None:
        with self._lock:
            self._asked = True
            if self._running:
                return  # the running thread looks again before it ends
            self._running = True
        threading.Thread(target=self._run, name=self._name, daemon=True).start()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._asked:
                    self._running = False
                    self._lock.notify_all()
                    return
                self._asked = False
            try:
                self._job()
            except Exception:  # tried again at the next soon(); whoever asked goes on either way
                with contextlib.suppress(Exception):  # a failing log line must not end the thread
                    log.exception("%s failed", self._what)

    def settled(self, timeout: float) -> bool:
        """Wait up to `timeout` s until every run asked for so far is done (at exit: the daemon's threads
        die with the process, a write in flight with them); True if it was."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._running, timeout)
