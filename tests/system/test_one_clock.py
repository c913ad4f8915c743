"""A whole daemon on one injected clock: a drain of four holders, the daemon restarted in the middle of it,
run on virtual time (tests/support/simclock.py), so each signal and each end lands at an exact time and
two runs of the same script agree to the millisecond.

Real: the fake metadata server over loopback HTTP, the daemon's watches, its loop, drain and index
threads, its state file and history. Scripted: the processes (`World`: signaller, exit waiter and scanner
in one), because a real process's exit lands at a real time, which no clock of the test can fix; the same
scenario with real processes and real signals is tests/system/test_one_record.py.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

from tests.support.daemon_harness import MAINTENANCE, DaemonHarness
from tests.support.simclock import SimulatedClock
from tests.support.waiting import wait_for
from tests.support.workloads import Workloads
from watchdog.core.clock import parse_utc_text
from watchdog.core.drain_record import ExitStatus, SignalResult
from watchdog.core.process import Holder, ProcessIdentity
from watchdog.fake.server import FakeMetadataServer
from watchdog.store.history import HISTORY_FILE, load_entries

TERM, KILL = int(signal.SIGTERM), int(signal.SIGKILL)
GRACE = 30.0
TERMINATE = "TERMINATE_ON_HOST_MAINTENANCE"


class World:
    """Four processes that never existed (PIDs above any pid_max): `exit_on` says which signal ends each;
    `exit_now` ends one at the script's word. What the drain sent, and when, is the world's log."""

    dry_run = False

    def __init__(self, clock: SimulatedClock) -> None:
        self.clock = clock
        self.holders = {n: Holder(ProcessIdentity(4_300_000 + n, 7), f"job{n}", (), 0, ("/dev/accel0",))
                        for n in range(4)}  # fmt: skip
        self.exit_on = {0: TERM, 1: TERM, 3: KILL}  # 2 exits when the script says (`exit_now`)
        self.alive = set(self.holders)
        self.exited: list[ProcessIdentity] = []
        self.watched: set[ProcessIdentity] = set()
        self.sent: list[tuple[int, int, float]] = []  # (holder, signal, monotonic time)
        self.lock = threading.Lock()

    def _number(self, identity: ProcessIdentity) -> int:
        return next(n for n, h in self.holders.items() if h.identity == identity)

    def processes(self) -> tuple[World, World]:
        return self, self

    def scan(self) -> Any:
        with self.lock:
            return type("Scan", (), {"holders": tuple(self.holders[n] for n in sorted(self.alive))})()

    def prepare(self, identities: object) -> None:
        pass

    def send(self, identity: ProcessIdentity, signum: int) -> SignalResult:
        n = self._number(identity)
        with self.lock:
            if n not in self.alive:
                return SignalResult.GONE
            self.sent.append((n, signum, self.clock.monotonic()))
        if self.exit_on.get(n) == signum:
            self.exit_now(n)
        return SignalResult.SENT

    def exit_now(self, n: int) -> None:
        with self.lock:
            self.alive.discard(n)
            self.exited.append(self.holders[n].identity)

    def watch(self, identity: ProcessIdentity) -> SignalResult | None:
        with self.lock:
            if self._number(identity) not in self.alive:
                return SignalResult.GONE
            self.watched.add(identity)
        return None

    def unwatch(self, identity: ProcessIdentity) -> None:
        with self.lock:
            self.watched.discard(identity)

    def watching(self) -> set[ProcessIdentity]:
        with self.lock:
            return set(self.watched)

    def wait(self, timeout: float) -> list[tuple[ProcessIdentity, ExitStatus]]:
        with self.lock:
            done = [(i, ExitStatus(code=0)) for i in self.exited if i in self.watched]
            self.exited = [i for i in self.exited if i not in self.watched]
            self.watched -= {i for i, _ in done}
        return done

    def running(self, identity: ProcessIdentity) -> bool:
        with self.lock:
            return self._number(identity) in self.alive


def run_script(tmp_path: Path, fake: FakeMetadataServer, workloads: Workloads) -> dict[str, Any]:
    """The scenario: the event; two holders go at SIGTERM, a third 8 s later; the daemon is stopped at
    +15 s and started again at +20 s; the fourth is killed at the deadline. Returns what every surface
    said, with times relative to the event."""
    clock = SimulatedClock()
    world = World(clock)
    state_dir = tmp_path / "state"
    wiring = {"clock": clock, "processes": world.processes}

    def daemon() -> tuple[DaemonHarness, threading.Thread]:
        harness = DaemonHarness(state_dir, fake, workloads, scanner=world, wiring=wiring,
                                maintenance_grace=GRACE)  # fmt: skip
        thread = clock.spawn(harness.daemon.run, "daemon under test")
        wait_for(harness.every_key_answered, what="every watched key answered")  # time stands still
        return harness, thread

    def stop(harness: DaemonHarness, thread: threading.Thread) -> None:
        harness.stop.set()
        thread.join(timeout=10)
        harness.transport.close()
        assert not thread.is_alive()

    with clock.acting():
        first, thread = daemon()
        event_at = clock.monotonic()
        fake.set(MAINTENANCE, TERMINATE)
        wait_for(lambda: len(world.sent) == 4, what="a SIGTERM to each of the four")
        clock.sleep(8.0)
        world.exit_now(2)
        clock.sleep(7.0)
        before = first.daemon.view.record  # the drain as the first daemon had it when it stopped
        drain_id = first.daemon.lifecycle.drain.drain_id  # type: ignore[union-attr]
        stop(first, thread)
        clock.sleep(5.0)  # the daemon is down: nothing of it waits
        again, thread = daemon()
        clock.sleep(GRACE - 20.0 + 1.0)  # past the deadline
        again.wait_state("timed_out")
        record = again.daemon.last_record
        duration = again.metric("tpu_watchdog_drain_duration_seconds_sum")
        stop(again, thread)
    (entry,) = [e for e in load_entries(str(state_dir / HISTORY_FILE)) if e["outcome"]]
    assert record is not None
    assert record.ended is not None
    assert before is not None
    assert entry["id"] == drain_id
    outcome = record.outcome.value if record.outcome else None
    return {
        "sent": [(n, signum, round(at - event_at, 3)) for n, signum, at in world.sent],
        "history": (
            round(parse_utc_text(str(entry["started"])) - (clock.wall() - clock.monotonic() + event_at), 3),
            entry["duration"],
            entry["outcome"],
            sorted(str(p["end"]) for p in entry["processes"]),
        ),
        "record": (
            round(record.started - event_at, 3),
            round(record.ended - record.started, 3),
            outcome,
            len(record.processes),
        ),
        "metric": round(duration, 3),
        "ends before the restart": sorted(
            (
                p.name,
                p.end.value if p.end else None,
                None if p.ended_at is None else round(p.ended_at - event_at, 3),
            )
            for p in before.processes.values()
        ),
    }


def test_a_drain_cut_by_a_restart_runs_on_the_injected_clock_to_the_millisecond(
    tmp_path: Path, fake: FakeMetadataServer, workloads: Workloads
) -> None:
    seen = run_script(tmp_path / "one", fake, workloads)
    assert seen["sent"] == [(0, TERM, 0.0), (1, TERM, 0.0), (2, TERM, 0.0), (3, TERM, 0.0), (3, KILL, GRACE)]
    assert seen["record"] == (0.0, GRACE, "timed_out", 4)  # its start is the event's, not the restart's
    assert seen["history"] == (0.0, GRACE, "timed_out", ["exited", "exited", "exited", "killed"])
    assert seen["metric"] == GRACE
    assert seen["ends before the restart"] == [
        ("job0", "exited", 0.0),
        ("job1", "exited", 0.0),
        ("job2", "exited", 8.0),
        ("job3", None, None),
    ]
    fake.set(MAINTENANCE, "NONE")
    assert run_script(tmp_path / "two", fake, workloads) == seen  # the same script, the same times
