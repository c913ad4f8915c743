"""One thread keeps every body deadline of a transport's requests, instead of a timer thread per request.

A body must arrive whole within its read timeout (see transport.py); when it does not, the deadline's action
shuts the connection's socket down. A `threading.Timer` per request did that too, but started and ended a
thread for each of the ~3 requests a minute at idle and many more under faults: each thread's stack and its
allocator arena are memory the process may keep (docs/reliability.md, steadiness). Here one lazily started
thread sleeps until the earliest deadline; cancelled deadlines are dropped from the heap when they reach the
top, and the heap is rebuilt when they outnumber the live ones, so it stays as small as the requests in
flight. The thread is woken only for a deadline earlier than the one it sleeps until: a body is read in
milliseconds, so at idle it wakes about once per read timeout, whatever the number of watches.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class Deadlines:
    """Run `action` `seconds` from now unless cancelled first; all in one daemon thread."""

    def __init__(self, name: str = "metadata-deadlines", clock: Callable[[], float] = time.monotonic) -> None:
        self._name = name
        self._clock = clock
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._live: set[int] = set()
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False

    def after(self, seconds: float, action: Callable[[], None]) -> int:
        """Schedule `action`; the token cancels it. After `close()`, the action is never run."""
        with self._cond:
            token = next(self._tokens)
            if self._closed:
                return token
            heapq.heappush(self._heap, (self._clock() + seconds, token, action))
            self._live.add(token)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            elif self._heap[0][1] == token:  # earlier than what the thread sleeps until (or it sleeps on)
                self._cond.notify()
            return token

    def cancel(self, token: int) -> None:
        with self._cond:
            self._live.discard(token)
            if len(self._heap) > 2 * len(self._live) + 8:  # mostly cancelled entries: drop them now
                self._heap = [entry for entry in self._heap if entry[1] in self._live]
                heapq.heapify(self._heap)

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._live)

    def close(self) -> None:
        """Forget every deadline and end the thread (idempotent)."""
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._live.clear()
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                heap = self._heap
                while heap and heap[0][1] not in self._live:
                    heapq.heappop(heap)
                if not heap:
                    self._cond.wait()
                    continue
                when, token, action = heap[0]
                left = when - self._clock()
                if left > 0:
                    self._cond.wait(left)
                    continue
                heapq.heappop(heap)
                self._live.discard(token)
                self._cond.release()
                try:
                    action()
                except Exception:  # a failing action must not end the deadlines of every other request
                    log.exception("a metadata request deadline's action failed")
                finally:
                    self._cond.acquire()
