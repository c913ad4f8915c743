"""A whole daemon on one injected clock: a drain of four holders, the daemon restarted in the middle of it,
run on virtual time (tests/support/simclock.py), so each signal and each end lands at an exact time and
two runs of the same script agree to the millisecond.

Real: the fake metadata server over loopback HTTP, the daemon's watches, its loop, drain and index
threads, its state file and history. Scripted: the processes (tests/support/scripted_world.py), because a
real process's exit lands at a real time, which no clock of the test can fix; the same scenario with real
processes and real signals is tests/system/test_one_record.py.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

from tests.support.daemon_harness import MAINTENANCE, DaemonHarness
from tests.support.scripted_world import FIRST_PID, ScriptedWorld, scripted_holder
from tests.support.simclock import SimulatedClock
from tests.support.waiting import wait_for
from tests.support.workloads import Workloads
from watchdog.core.clock import parse_utc_text
from watchdog.fake.server import FakeMetadataServer
from watchdog.store.history import HISTORY_FILE, load_entries

TERM, KILL = int(signal.SIGTERM), int(signal.SIGKILL)
GRACE = 30.0
TERMINATE = "TERMINATE_ON_HOST_MAINTENANCE"


def run_script(tmp_path: Path, fake: FakeMetadataServer, workloads: Workloads) -> dict[str, Any]:
    """The scenario: the event; two holders go at SIGTERM, a third 8 s later; the daemon is stopped at
    +15 s and started again at +20 s; the fourth is killed at the deadline. Returns what every surface
    said, with times relative to the event."""
    clock = SimulatedClock()
    holders = [scripted_holder(n) for n in range(4)]
    # Two go at their SIGTERM, one (2) when the script says, one (3) only at its SIGKILL.
    world = ScriptedWorld(clock, holders, {holders[0].identity: TERM, holders[1].identity: TERM,
                                           holders[3].identity: KILL})  # fmt: skip
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
        world.exit_now(holders[2].identity)
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
        "sent": [(i.pid - FIRST_PID, signum, round(at - event_at, 3)) for i, signum, at in world.sent],
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
