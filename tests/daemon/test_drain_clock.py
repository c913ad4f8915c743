"""The drain loop (run_drain) driven by an injected clock and a scripted world: no processes and no real time,
so deadlines and stops are exact (the real-process cases: test_drain_thread.py)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest

from watchdog.core.drain import DrainPlan
from watchdog.core.drain_record import DrainRecord, ExitStatus, SignalResult
from watchdog.core.process import Holder, ProcessIdentity
from watchdog.core.vocabulary import Outcome
from watchdog.daemon.drain_thread import DrainListener, run_drain

TERM, KILL = signal.SIGTERM, signal.SIGKILL


@dataclass
class StaticScan:
    holders: tuple[Holder, ...] = ()


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


class FakeWorld:
    """Signaller, exit waiter and scanner in one: processes live until the script says they exit."""

    dry_run = False

    def __init__(
        self, clock: FakeClock, holders: list[Holder], exit_on: dict[int, set[ProcessIdentity]]
    ) -> None:
        self.clock, self.holding, self.exit_on = clock, list(holders), exit_on
        self.log: list[tuple[str, ProcessIdentity, int, float]] = []
        self.exited: list[ProcessIdentity] = []
        self.watched: set[ProcessIdentity] = set()

    def prepare(self, identities: object) -> None:
        pass

    def send(self, identity: ProcessIdentity, signum: int) -> SignalResult:
        assert ("intent", identity, signum, self.clock.now) in self.log  # write-ahead came first
        self.log.append(("send", identity, signum, self.clock.now))
        if identity in self.exit_on.get(signum, set()):
            self.exited.append(identity)
            self.holding = [h for h in self.holding if h.identity != identity]
        return SignalResult.SENT

    def scan(self) -> StaticScan:
        return StaticScan(tuple(self.holding))

    def watch(self, identity: ProcessIdentity) -> SignalResult | None:
        self.watched.add(identity)
        return None

    def unwatch(self, identity: ProcessIdentity) -> None:
        self.watched.discard(identity)

    def watching(self) -> set[ProcessIdentity]:
        return set(self.watched)

    def wait(self, timeout: float) -> list[tuple[ProcessIdentity, ExitStatus]]:
        done = [(i, ExitStatus(code=0)) for i in self.exited if i in self.watched]
        self.exited = []
        for i, _ in done:
            self.watched.discard(i)
        return done

    def running(self, identity: ProcessIdentity) -> bool:
        return True


class WorldListener(DrainListener):
    """Logs the write-ahead intents in the world's log; hands each record update to `on_update`."""

    def __init__(self, world: FakeWorld, on_update: Callable[[DrainRecord], None]) -> None:
        self.world, self.on_update = world, on_update

    def before_signals(self, intents: Sequence[tuple[ProcessIdentity, int]], record: DrainRecord) -> None:
        self.world.log += [("intent", i, signum, self.world.clock.now) for i, signum in intents]

    def updated(self, record: DrainRecord) -> None:
        self.on_update(record)


def fake_holder(pid: int) -> Holder:
    return Holder(ProcessIdentity(pid, 1), f"p{pid}", (), 0, ("/dev/accel0",))


def test_the_deadline_follows_the_injected_clock() -> None:
    clock = FakeClock()
    obedient, stubborn = fake_holder(1), fake_holder(2)
    world = FakeWorld(clock, [obedient, stubborn], {TERM: {obedient.identity}, KILL: {stubborn.identity}})
    updates: list[DrainRecord] = []
    record = run_drain(
        [obedient, stubborn],
        DrainPlan(grace=30),
        scanner=world,
        listener=WorldListener(world, updates.append),
        signaller=world,
        exits=world,
        clock=clock,
    )
    assert record.outcome is Outcome.TIMED_OUT
    sends = [(e[1].pid, e[2], e[3] - 5000.0) for e in world.log if e[0] == "send"]
    assert sends == [(1, TERM, 0.0), (2, TERM, 0.0), (2, KILL, pytest.approx(30.0))]
    assert str(record.processes[stubborn.identity].exit_status) == "exited 0"
    assert updates[-1].outcome is Outcome.TIMED_OUT
    assert len(updates) < 40  # throttled: not one copy per 0.1 s tick of a 30 s drain


def test_stop_interrupts_before_the_deadline_under_an_injected_clock() -> None:
    clock = FakeClock()
    h = fake_holder(1)
    world = FakeWorld(clock, [h], {})
    stop = threading.Event()

    def update(record: DrainRecord) -> None:
        if clock.now > 5010:
            stop.set()

    record = run_drain(
        [h],
        DrainPlan(grace=300),
        scanner=world,
        listener=WorldListener(world, update),
        stop=stop,
        signaller=world,
        exits=world,
        clock=clock,
    )
    assert record.outcome is Outcome.INTERRUPTED
    assert record.ended is not None
    assert record.ended - record.started < 12
    assert not record.processes[h.identity].killed
