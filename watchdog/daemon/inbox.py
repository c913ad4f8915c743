"""The loop's inbox: what the other threads report (a metadata answer, a scan, the state writer's word,
SIGHUP), in order, and an eventfd that says it has something.

The eventfd is what lets the loop wait on everything at once: it polls it with a running drain's pidfds
(`host/exits.py`), so one poll(2) ends at a message or at a process's exit, whichever comes first.
"""

from __future__ import annotations

import collections
import queue
import select
from typing import Generic, TypeVar

from watchdog.host.exits import Wakeup

T = TypeVar("T")


class Inbox(Generic[T]):
    """A queue any thread puts into and the loop alone takes from; `put` rings `wakeup`."""

    def __init__(self) -> None:
        self._messages: collections.deque[T] = collections.deque()
        self.wakeup = Wakeup()  # polled by the loop, with a drain's pidfds while one runs

    def put(self, message: T) -> None:
        self._messages.append(message)  # before the ring: a woken loop finds it
        self.wakeup.ring()

    def ring(self) -> None:
        """Wake the loop with no message (the stop)."""
        self.wakeup.ring()

    def ready(self) -> bool:
        return bool(self._messages)

    def get_nowait(self) -> T:
        """The oldest message; queue.Empty when there is none."""
        try:
            return self._messages.popleft()
        except IndexError:
            raise queue.Empty from None

    def empty(self) -> bool:
        return not self._messages

    def wait(self, timeout: float) -> None:
        """Block until something is put or rung, or `timeout` s pass (the loop with no drain running)."""
        if self._messages:
            return
        probe = select.poll()
        probe.register(self.wakeup.fd, select.POLLIN)
        if probe.poll(max(0, int(timeout * 1000 + 0.999))):
            self.wakeup.clear()
