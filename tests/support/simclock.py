"""Virtual time for a whole daemon: the `Clock` a test injects so that a drain, restart included, runs on
the test's time and the same script always gives the same times.

The actors are the threads the clock spawned (the loop, the scanning thread, the state writer while it
writes) and the test's own (`acting`). Time moves only when every actor waits on the clock and each has
looked at its primitive (its queue, pidfds, event) since the last actor began to wait, and found nothing:
then it jumps to the earliest of their deadlines. An actor that runs (a scan, a write, a test's
`wait_for` on what the daemon did) holds time still, so what the daemon does in answer to an input
happens at the instant the input came: a wave held for its write-ahead goes when the write is done, at
the same instant, never at the end of its 0.5 s bound. Threads outside (the metadata watches, webhooks,
hooks) keep real time: they are inputs and outputs, and never decide when the daemon acts.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

SLICE = 0.002  # real s an actor waits between looks (a wake from outside the clock is seen within it)


class SimulatedClock:
    def __init__(self, mono: float = 1000.0, wall: float = 1_800_000_000.0) -> None:
        self._mono, self._wall, self._now = mono, wall, 0.0
        self._cond = threading.Condition()
        self._actors: set[threading.Thread] = set()
        self._waiting: dict[threading.Thread, tuple[float, int]] = {}  # deadline, generation looked at
        self._generation = 0  # moves whenever an actor begins to wait or ends: everyone looks again

    def monotonic(self) -> float:
        with self._cond:
            return self._mono + self._now

    def wall(self) -> float:
        with self._cond:
            return self._wall + self._now

    def wait(self, timeout: float, look: Callable[[float], bool]) -> bool:
        me = threading.current_thread()
        with self._cond:
            if me not in self._actors:
                raise RuntimeError(f"thread {me.name} waits on the simulated clock, which did not spawn it")
            deadline = self._now + max(0.0, timeout)
            self._moved()
        try:
            while True:
                with self._cond:
                    seen = self._generation  # read before the look: a change after it is looked at again
                if look(0.0):
                    return True
                with self._cond:
                    if self._now >= deadline:
                        return False
                    self._waiting[me] = (deadline, seen)
                    if self._waiting.keys() == self._actors and all(
                        generation == self._generation for _, generation in self._waiting.values()
                    ):
                        self._now = min(d for d, _ in self._waiting.values())
                        self._moved()
                    else:
                        self._cond.wait(SLICE)
        finally:
            with self._cond:
                self._waiting.pop(me, None)

    def sleep(self, seconds: float) -> None:
        """The test's own wait: `seconds` pass on this clock, the daemon doing meanwhile what is due."""
        self.wait(seconds, lambda _: False)

    def spawn(self, target: Callable[[], None], name: str) -> threading.Thread:
        def run() -> None:
            try:
                target()
            finally:
                self._leave(threading.current_thread())

        thread = threading.Thread(target=run, name=name, daemon=True)
        with self._cond:
            self._actors.add(thread)  # before it starts: time cannot move before its first wait
        thread.start()
        return thread

    @contextlib.contextmanager
    def acting(self) -> Iterator[None]:
        """The calling thread (the test's script) is an actor while inside."""
        me = threading.current_thread()
        with self._cond:
            self._actors.add(me)
        try:
            yield
        finally:
            self._leave(me)

    def _leave(self, thread: threading.Thread) -> None:
        with self._cond:
            self._actors.discard(thread)
            self._waiting.pop(thread, None)
            self._moved()

    def _moved(self) -> None:
        self._generation += 1
        self._cond.notify_all()
