"""A crash at each step of a drain, then a restart: same deadline (never extended), no second SIGTERM to a
process already signalled (at most once per event), SIGKILL still on time. And a clean stop mid-drain.

Each crash point is written into the state file exactly as the daemon writes it at that step (the state
file is the only thing a crash leaves behind), then a real daemon starts on it.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon_harness import MAINTENANCE, DaemonHarness
from tests.support.waiting import wait_for
from tests.support.workloads import Child, Workloads
from watchdog.core.lifecycle import ActiveDrain, Event
from watchdog.fake.server import FakeMetadataServer
from watchdog.store.records import SavedState
from watchdog.store.statefile import StateStore

TERMINATE = "TERMINATE_ON_HOST_MAINTENANCE"


@pytest.fixture(autouse=True)
def event_still_on(fake: FakeMetadataServer) -> None:
    fake.set(MAINTENANCE, TERMINATE)  # the event is still on when the daemon comes back


def crashed_at(state_dir: Path, deadline: float, child: Child, signals: dict[int, bool]) -> None:
    """The state file a daemon leaves when it dies mid-drain: `signals` maps each signal to whether it was
    confirmed sent (True) or only intended (False: the crash came between intent and send)."""
    store = StateStore(str(state_dir))
    event = Event("ev-crash", "maintenance-event", TERMINATE, deadline - 300.0)
    drain = ActiveDrain(["ev-crash"], deadline - 300.0, deadline)
    store.save_lifecycle([event], drain, None, on_timeout="kill")
    for signum, confirmed in signals.items():
        store.record_intent(child.identity, signum, name="python3")
        if confirmed:
            store.record_sent(child.identity, signum, "sent")


def never_said_term(child: Child) -> None:
    with pytest.raises(AssertionError, match="said nothing"):
        child.expect("term", timeout=1.0)  # the pipe closed without a word: no SIGTERM ever arrived


@pytest.mark.parametrize(
    ("step", "signals"),
    [
        ("after intent, before the signal", {signal.SIGTERM: False}),
        ("after the signal", {signal.SIGTERM: True}),
    ],
)
def test_a_signalled_process_is_not_signalled_again_and_is_killed_on_time(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path, step: str, signals: dict[int, bool]
) -> None:
    child = workloads.start("report")  # says "term" for every SIGTERM; never exits by itself
    deadline = time.time() + 3.0
    crashed_at(tmp_path / "state", deadline, child, signals)
    with DaemonHarness(tmp_path / "state", fake, workloads) as harness:
        assert harness.daemon.lifecycle.drain is not None
        assert harness.daemon.lifecycle.drain.deadline == deadline  # not extended by the restart
        assert child.popen.wait(timeout=15) == -signal.SIGKILL
        killed_at = time.time()
        harness.wait_state("timed_out")
        assert harness.metric("tpu_watchdog_signals_sent_total", signal="SIGTERM") == 0
    assert deadline - 0.5 <= killed_at <= deadline + 5.0, step
    never_said_term(child)


def test_crash_before_the_first_intent_signals_once_with_the_same_deadline(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path
) -> None:
    child = workloads.start("report")
    deadline = time.time() + 3.0
    crashed_at(tmp_path / "state", deadline, child, {})
    with DaemonHarness(tmp_path / "state", fake, workloads) as harness:
        child.expect("term")
        assert child.popen.wait(timeout=15) == -signal.SIGKILL
        killed_at = time.time()
        harness.wait_state("timed_out")
        assert harness.metric("tpu_watchdog_signals_sent_total", signal="SIGTERM") == 1
    assert deadline - 0.5 <= killed_at <= deadline + 5.0
    with pytest.raises(AssertionError, match="said nothing"):
        child.expect("term", timeout=1.0)  # exactly one SIGTERM


@pytest.mark.parametrize(
    "signals",
    [{signal.SIGTERM: True}, {signal.SIGTERM: True, signal.SIGKILL: False}],
    ids=["term", "kill-intent"],
)
def test_crash_during_escalation_kills_at_once(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path, signals: dict[int, bool]
) -> None:
    child = workloads.start("report")
    crashed_at(tmp_path / "state", time.time() - 1.0, child, signals)  # the deadline has passed
    with DaemonHarness(tmp_path / "state", fake, workloads) as harness:
        assert child.popen.wait(timeout=10) == -signal.SIGKILL
        harness.wait_state("timed_out")
    never_said_term(child)


def test_a_clean_stop_mid_drain_is_fast_and_the_next_start_resumes(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path
) -> None:
    child = workloads.start("report")
    state_dir = tmp_path / "state"
    harness = DaemonHarness(state_dir, fake, workloads, maintenance_grace=4.0)
    with harness:
        child.expect("term")
        drain = harness.daemon.lifecycle.drain
        assert drain is not None
        deadline = drain.deadline
        started = time.monotonic()
        harness.stop.set()
        harness.thread.join(timeout=5)
        assert time.monotonic() - started < 2.0
    saved = StateStore(str(state_dir)).state
    assert saved.drain is not None
    assert saved.drain.deadline == deadline
    assert [s.signal for s in saved.signals] == ["SIGTERM"]
    with DaemonHarness(state_dir, fake, workloads, maintenance_grace=4.0) as again:
        assert again.daemon.lifecycle.drain is not None
        assert again.daemon.lifecycle.drain.deadline == deadline
        assert child.popen.wait(timeout=15) == -signal.SIGKILL
        again.wait_state("timed_out")
    with pytest.raises(AssertionError, match="said nothing"):
        child.expect("term", timeout=1.0)  # the resumed drain did not SIGTERM again
    wait_for(lambda: not child.alive(), what="the child to be gone")


class GatedStore(StateStore):
    """A state store whose write of a new drain waits for the test: a slow disk, on demand."""

    def __init__(self, state_dir: str) -> None:
        super().__init__(state_dir)
        self.gate = threading.Event()

    def lifecycle_change(
        self, events: Any, drain: Any, last_outcome: str | None, **kwargs: Any
    ) -> Callable[[SavedState], SavedState]:
        change = super().lifecycle_change(events, drain, last_outcome, **kwargs)
        if drain is None:
            return change

        def gated(state: SavedState) -> SavedState:
            self.gate.wait(timeout=20)
            return change(state)

        return gated


def test_a_drain_whose_own_write_is_slow_signals_and_keeps_its_intent(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path
) -> None:
    """The write of the new drain's state is held back: its SIGTERM goes out anyway, once its write-ahead has
    waited its bound (a slow disk holds no signal back for long), and its intent, queued behind the drain's
    own write, is on file with the drain. A drain started before its state's write was queued would write
    its intent first, and the drain's write (a new drain: no signals yet) would then wipe it out."""
    fake.set(MAINTENANCE, "NONE")
    child = workloads.start("report")
    store = GatedStore(str(tmp_path / "state"))
    with DaemonHarness(tmp_path / "state", fake, workloads, store=store) as harness:
        fake.set(MAINTENANCE, TERMINATE)
        child.expect("term", timeout=3.0)  # its write-ahead's bound is 0.5 s (it was 5 s)
        assert store.state.drain is None, "the drain's own write was held back"
        store.gate.set()
        harness.wait_metric("tpu_watchdog_signals_sent_total", 1, signal="SIGTERM")
        wait_for(lambda: store.state.drain is not None, what="the drain's write")
        wait_for(lambda: store.state.find(child.identity, signal.SIGTERM) is not None, what="the intent")
    saved = StateStore(str(tmp_path / "state")).state
    assert saved.drain is not None
    intent = saved.find(child.identity, signal.SIGTERM)
    assert intent is not None
    assert intent.result == "sent"  # its result too, written after the drain's own state


def test_a_drain_that_was_being_cancelled_is_not_resumed(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path
) -> None:
    """Stopped after the event cleared but before the drain had ended: the drain is over, not resumed."""
    fake.set(MAINTENANCE, "NONE")
    child = workloads.start("report")
    store = StateStore(str(tmp_path / "state"))
    deadline = time.time() + 1.0
    drain = ActiveDrain(["ev-gone"], deadline - 300.0, deadline)
    store.save_lifecycle([], drain, None, on_timeout="kill")
    with DaemonHarness(tmp_path / "state", fake, workloads) as harness:
        assert harness.daemon.lifecycle.drain is None
        assert harness.state == "idle"
        assert harness.daemon.lifecycle.last_outcome == "cancelled"
    assert child.alive()
    never_said_term(child)


def test_an_event_of_a_key_this_machine_lacks_clears(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path
) -> None:
    """A drained upcoming-maintenance event in the state file, and the key now answers 404."""
    fake.set(MAINTENANCE, "NONE")
    fake.delete("instance/upcoming-maintenance")
    store = StateStore(str(tmp_path / "state"))
    event = Event("ev-up", "upcoming-maintenance", "SCHEDULED window_start=?", time.time() - 60, True)
    store.save_lifecycle([event], None, "exited", on_timeout="kill")
    with DaemonHarness(tmp_path / "state", fake, workloads) as harness:
        harness.wait_state("idle")
        assert harness.daemon.lifecycle.events == {}
