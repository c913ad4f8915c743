"""The drain loop (run_drain) driven by an injected clock and a scripted world: no processes and no real time,
so deadlines and stops are exact (the real-process cases: test_draining.py)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Sequence

import pytest

from tests.support.scripted_world import FIRST_PID, ScriptedWorld, scripted_holder
from watchdog.core.drain import DrainPlan
from watchdog.core.drain_record import DrainRecord
from watchdog.core.process import ProcessIdentity
from watchdog.core.vocabulary import Outcome
from watchdog.daemon.draining import DrainListener, run_drain

TERM, KILL = int(signal.SIGTERM), int(signal.SIGKILL)


class FakeClock:
    def __init__(self) -> None:
        self.now = 5000.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1.7e9 + self.now

    def wait(self, timeout: float, look: Callable[[float], bool]) -> bool:
        """Time passes only here: a look now, else the whole timeout, and a look then."""
        if look(0.0):
            return True
        self.now += timeout
        return look(0.0)

    def spawn(self, target: Callable[[], None], name: str) -> threading.Thread:
        raise AssertionError("a drain under test starts no thread")


class IntentsFirst(DrainListener):
    """Keeps the write-ahead intents, checks that each signal's came first (the world's `before_send`),
    and hands each record update to `on_update`."""

    def __init__(self, clock: FakeClock, on_update: Callable[[DrainRecord], None]) -> None:
        self.clock, self.on_update = clock, on_update
        self.intents: list[tuple[ProcessIdentity, int, float]] = []

    def before_signals(self, intents: Sequence[tuple[ProcessIdentity, int]], record: DrainRecord) -> None:
        self.intents += [(i, signum, self.clock.now) for i, signum in intents]

    def check(self, identity: ProcessIdentity, signum: int) -> None:
        assert (identity, signum, self.clock.now) in self.intents  # write-ahead came first

    def updated(self, record: DrainRecord) -> None:
        self.on_update(record)


def test_the_deadline_follows_the_injected_clock() -> None:
    clock = FakeClock()
    obedient, stubborn = scripted_holder(1), scripted_holder(2)
    updates: list[DrainRecord] = []
    listener = IntentsFirst(clock, updates.append)
    world = ScriptedWorld(clock, [obedient, stubborn], {obedient.identity: TERM, stubborn.identity: KILL},
                          before_send=listener.check)  # fmt: skip
    record = run_drain(
        [obedient, stubborn],
        DrainPlan(grace=30),
        scanner=world,
        listener=listener,
        signaller=world,
        exits=world,
        clock=clock,
    )
    assert record.outcome is Outcome.TIMED_OUT
    sends = [(i.pid - FIRST_PID, signum, at - 5000.0) for i, signum, at in world.sent]
    assert sends == [(1, TERM, 0.0), (2, TERM, 0.0), (2, KILL, pytest.approx(30.0))]
    assert str(record.processes[stubborn.identity].exit_status) == "exited 0"
    assert updates[-1].outcome is Outcome.TIMED_OUT
    assert len(updates) < 40  # throttled: not one copy per 0.1 s tick of a 30 s drain


def test_stop_interrupts_before_the_deadline_under_an_injected_clock() -> None:
    clock = FakeClock()
    h = scripted_holder(1)
    stop = threading.Event()

    def update(record: DrainRecord) -> None:
        if clock.now > 5010:
            stop.set()

    listener = IntentsFirst(clock, update)
    world = ScriptedWorld(clock, [h], {}, before_send=listener.check)
    record = run_drain(
        [h],
        DrainPlan(grace=300),
        scanner=world,
        listener=listener,
        stop=stop,
        signaller=world,
        exits=world,
        clock=clock,
    )
    assert record.outcome is Outcome.INTERRUPTED
    assert record.ended is not None
    assert record.ended - record.started < 12
    assert not record.processes[h.identity].killed
