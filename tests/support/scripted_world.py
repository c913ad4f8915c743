"""Processes that exist only in a test's script: the drain's scanner, signaller and exit waiter in one.

A real process's exit lands at a real time, which no clock of a test can fix; these end when the script
says (`exit_on`: the signal that ends each; `exit_now`), so a drain run on an injected clock sends each
signal at an exact time. Their PIDs are above any pid_max: nothing real is ever signalled. Thread-safe: a
daemon's loop and the test's own thread both use it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from watchdog.core.drain_record import ExitStatus, SignalResult
from watchdog.core.process import Holder, ProcessIdentity

FIRST_PID = 4_300_000  # above the kernel's largest pid_max (2^22): no real process has one


class MonotonicClock(Protocol):
    def monotonic(self) -> float: ...


@dataclass(frozen=True)
class Scan:
    holders: tuple[Holder, ...] = ()


def scripted_holder(n: int, name: str = "") -> Holder:
    """Holder number `n` of the script (its PID: FIRST_PID + n), holding /dev/accel0."""
    return Holder(ProcessIdentity(FIRST_PID + n, 7), name or f"job{n}", (), 0, ("/dev/accel0",))


class ScriptedWorld:
    """`holders` hold the device until they exit: at the signal `exit_on` names for them, or at the
    script's `exit_now`. `sent`: each signal that reached a live holder, with its time on `clock`.
    `before_send`: called with each signal before it goes (a test's check of what must come first)."""

    dry_run = False

    def __init__(
        self, clock: MonotonicClock, holders: Sequence[Holder], exit_on: Mapping[ProcessIdentity, int],
        before_send: Callable[[ProcessIdentity, int], None] = lambda identity, signum: None,
    ) -> None:  # fmt: skip
        self.clock, self.holders, self.exit_on = clock, list(holders), dict(exit_on)
        self.before_send = before_send
        self.alive = {h.identity for h in holders}
        self.sent: list[tuple[ProcessIdentity, int, float]] = []
        self._exited: list[ProcessIdentity] = []
        self._watched: set[ProcessIdentity] = set()
        self._lock = threading.Lock()

    def processes(self) -> tuple[ScriptedWorld, ScriptedWorld]:
        """The daemon's seam (`Daemon(processes=...)`): each drain's signaller and exit waiter."""
        return self, self

    def scan(self) -> Scan:
        with self._lock:
            return Scan(tuple(h for h in self.holders if h.identity in self.alive))

    def prepare(self, identities: object) -> None:
        pass

    def send(self, identity: ProcessIdentity, signum: int) -> SignalResult:
        self.before_send(identity, signum)
        with self._lock:
            if identity not in self.alive:
                return SignalResult.GONE
            self.sent.append((identity, signum, self.clock.monotonic()))
        if self.exit_on.get(identity) == signum:
            self.exit_now(identity)
        return SignalResult.SENT

    def exit_now(self, identity: ProcessIdentity) -> None:
        with self._lock:
            self.alive.discard(identity)
            self._exited.append(identity)

    def watch(self, identity: ProcessIdentity) -> SignalResult | None:
        with self._lock:
            if identity not in self.alive:
                return SignalResult.GONE
            self._watched.add(identity)
        return None

    def unwatch(self, identity: ProcessIdentity) -> None:
        with self._lock:
            self._watched.discard(identity)

    def watching(self) -> set[ProcessIdentity]:
        with self._lock:
            return set(self._watched)

    def wait(self, timeout: float) -> list[tuple[ProcessIdentity, ExitStatus]]:
        """The exits of watched holders since the last call (never blocks: time is the clock's)."""
        with self._lock:
            done = [(i, ExitStatus(code=0)) for i in self._exited if i in self._watched]
            self._exited = [i for i in self._exited if i not in self._watched]
            self._watched -= {i for i, _ in done}
        return done

    def running(self, identity: ProcessIdentity) -> bool:
        with self._lock:
            return identity in self.alive
