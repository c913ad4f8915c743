"""The daemon's state machine: one drain per event, deadlines only move earlier, clearing cancels."""

from __future__ import annotations

import pytest

from watchdog.core.lifecycle import (
    ActiveDrain,
    CancelDrain,
    Event,
    EventCleared,
    EventStarted,
    Lifecycle,
    MoveDeadline,
    StartDrain,
    Trigger,
    joined_outcome,
)
from watchdog.core.vocabulary import DaemonState

TERMINATE = Trigger("maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE", 300.0)
PREEMPTED = Trigger("preempted", "TRUE", 25.0)


def kinds(actions: list[object]) -> list[type]:
    return [type(a) for a in actions]


def test_a_trigger_starts_one_drain_with_its_grace() -> None:
    life = Lifecycle()
    actions = life.observe("maintenance-event", TERMINATE, now=1000.0)
    assert kinds(actions) == [EventStarted, StartDrain]
    start = actions[1]
    assert isinstance(start, StartDrain)
    assert start.deadline == 1300.0
    assert life.state is DaemonState.DRAINING


def test_nothing_happens_without_a_trigger() -> None:
    life = Lifecycle()
    assert life.observe("maintenance-event", None, now=1.0) == []
    assert life.state is DaemonState.IDLE


def test_the_same_event_never_drains_twice() -> None:
    life = Lifecycle()
    life.observe("maintenance-event", TERMINATE, now=0.0)
    life.drain_finished("exited", now=100.0)
    assert life.state is DaemonState.DRAINED
    # The watch reconnects and reports the same value again: same event, no second drain.
    assert life.observe("maintenance-event", TERMINATE, now=50.0) == []
    assert life.state is DaemonState.DRAINED


def test_a_new_episode_after_clearing_drains_again() -> None:
    life = Lifecycle()
    life.observe("maintenance-event", TERMINATE, now=0.0)
    life.drain_finished("exited", now=100.0)
    assert kinds(life.observe("maintenance-event", None, now=10.0)) == [EventCleared]
    assert life.state is DaemonState.IDLE
    assert kinds(life.observe("maintenance-event", TERMINATE, now=20.0)) == [EventStarted, StartDrain]


def test_clearing_mid_drain_cancels_it() -> None:
    life = Lifecycle()
    life.observe("maintenance-event", TERMINATE, now=0.0)
    actions = life.observe("maintenance-event", None, now=5.0)
    assert kinds(actions) == [EventCleared, CancelDrain]
    assert life.state is DaemonState.DRAINING  # until the engine reports the cancellation
    life.drain_finished("cancelled", now=100.0)
    assert life.state is DaemonState.IDLE


def test_a_preemption_during_a_maintenance_drain_shortens_the_deadline() -> None:
    life = Lifecycle()
    life.observe("maintenance-event", TERMINATE, now=0.0)
    actions = life.observe("preempted", PREEMPTED, now=100.0)
    assert kinds(actions) == [EventStarted, MoveDeadline]
    move = actions[1]
    assert isinstance(move, MoveDeadline)
    assert move.deadline == 125.0
    assert life.drain is not None
    assert life.drain.deadline == 125.0


def test_a_deadline_is_never_extended() -> None:
    life = Lifecycle()
    life.observe("preempted", PREEMPTED, now=0.0)
    assert kinds(life.observe("maintenance-event", TERMINATE, now=1.0)) == [EventStarted]
    assert life.drain is not None
    assert life.drain.deadline == 25.0


def test_a_drain_serving_two_events_survives_one_clearing() -> None:
    life = Lifecycle()
    life.observe("maintenance-event", TERMINATE, now=0.0)
    life.observe("preempted", PREEMPTED, now=1.0)
    assert kinds(life.observe("maintenance-event", None, now=2.0)) == [EventCleared]
    assert kinds(life.observe("preempted", None, now=3.0)) == [EventCleared, CancelDrain]


def test_an_event_after_a_finished_drain_from_another_source_drains_again() -> None:
    life = Lifecycle()
    life.observe("maintenance-event", TERMINATE, now=0.0)
    life.drain_finished("timed_out", now=100.0)
    assert life.state is DaemonState.TIMED_OUT
    actions = life.observe("preempted", PREEMPTED, now=400.0)
    assert kinds(actions) == [EventStarted, StartDrain]


def test_a_value_change_within_an_episode_is_the_same_event() -> None:
    life = Lifecycle()
    migrate = Trigger("maintenance-event", "MIGRATE_ON_HOST_MAINTENANCE", 300.0)
    life.observe("maintenance-event", migrate, now=0.0)
    life.drain_finished("exited", now=100.0)
    assert life.observe("maintenance-event", TERMINATE, now=30.0) == []
    assert life.events["maintenance-event"].value == TERMINATE.value


def test_an_event_during_a_cancellation_gets_its_own_drain_afterwards() -> None:
    life = Lifecycle()
    life.observe("maintenance-event", TERMINATE, now=0.0)
    assert kinds(life.observe("maintenance-event", None, now=5.0)) == [EventCleared, CancelDrain]
    # A preemption arrives before the engine has reported the cancellation: it must not join a drain
    # that is ending without SIGKILL, and it must not be marked drained by it.
    assert kinds(life.observe("preempted", PREEMPTED, now=5.1)) == [EventStarted]
    actions = life.drain_finished("cancelled", now=5.2)
    assert kinds(actions) == [StartDrain]
    start = actions[0]
    assert isinstance(start, StartDrain)
    assert start.event.source == "preempted"
    assert start.deadline == 30.1  # its own grace, counted from when it was seen
    assert life.state is DaemonState.DRAINING


def test_a_cancellation_is_asked_once() -> None:
    life = Lifecycle()
    life.observe("maintenance-event", TERMINATE, now=0.0)
    life.observe("maintenance-event", None, now=1.0)
    assert life.observe("maintenance-event", None, now=2.0) == []


# -- late arrivals and restored events ---------------------------------------------------------------------


def drained_lifecycle() -> Lifecycle:
    life = Lifecycle()
    life.observe("maintenance-event", TERMINATE, 1000.0)
    life.drain_finished("exited", 1001.0)
    return life


def test_a_late_arrival_joins_its_events_drain_reopened_with_the_events_deadline() -> None:
    life = drained_lifecycle()
    assert life.ended is not None
    first = life.ended.drain_id
    (start,) = life.late_arrivals(1010.0)
    assert isinstance(start, StartDrain)
    assert start.late
    assert start.deadline == 1300.0  # the event's, not now + grace
    assert (start.drain_id, start.started) == (first, 1000.0)  # the same drain: its id, its start
    assert life.drain is not None
    assert life.drain.late
    assert (life.drain.drain_id, life.drain.started) == (first, 1000.0)
    assert life.last_outcome == "exited"  # the first end's, until it ends again
    assert life.late_arrivals(1011.0) == []  # one drain at a time
    life.drain_finished("exited", 1012.0)
    assert life.state is DaemonState.DRAINED
    assert life.ended_at == 1001.0  # when it first ended
    (again,) = life.late_arrivals(1020.0)  # a second late arrival: the same drain again
    assert isinstance(again, StartDrain)
    assert again.drain_id == first


@pytest.mark.parametrize(
    ("first", "then", "joined"),
    [
        ("exited", "timed_out", "timed_out"),  # a late arrival killed at the deadline: it timed out
        ("timed_out", "exited", "timed_out"),
        ("no_holders", "exited", "exited"),
        ("exited", "cancelled", "exited"),  # the event cleared: the late arrival was spared
        ("timed_out", "no_holders", "timed_out"),
    ],
)
def test_a_reopened_drain_keeps_its_first_outcome_unless_a_later_end_tells_more(
    first: str, then: str, joined: str
) -> None:
    life = Lifecycle()
    life.observe("maintenance-event", TERMINATE, 1000.0)
    life.drain_finished(first, 1001.0)
    life.late_arrivals(1010.0)
    life.drain_finished(then, 1012.0)
    assert life.last_outcome == joined == joined_outcome(first, then)


def test_a_restart_after_the_drain_ended_still_knows_the_drain_a_late_arrival_joins() -> None:
    life = drained_lifecycle()
    ended = life.ended
    assert ended is not None
    back = Lifecycle.restored(life.events.values(), None, "exited", ended=ended, ended_at=1001.0)
    (start,) = back.late_arrivals(1010.0)
    assert isinstance(start, StartDrain)
    assert (start.drain_id, start.started, start.late) == (ended.drain_id, 1000.0, True)


def test_once_its_events_clear_nobody_joins_the_ended_drain() -> None:
    life = drained_lifecycle()
    life.observe("maintenance-event", None, 1005.0)
    assert life.ended is None
    (_, start) = life.observe("maintenance-event", TERMINATE, 1006.0)
    assert isinstance(start, StartDrain)
    assert start.started == 1006.0
    assert not start.late


def test_no_late_arrival_drain_without_an_event() -> None:
    life = drained_lifecycle()
    life.observe("maintenance-event", None, 1005.0)
    assert life.late_arrivals(1010.0) == []


def test_a_shorter_grace_within_the_event_moves_the_events_deadline_for_late_arrivals() -> None:
    life = drained_lifecycle()
    life.observe(
        "maintenance-event", Trigger("maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE", 5.0), 1002.0
    )
    (start,) = life.late_arrivals(1003.0)
    assert isinstance(start, StartDrain)
    assert start.deadline == 1007.0


def test_drain_ids_read_as_utc_times_to_the_millisecond() -> None:
    life = Lifecycle()
    (_, start) = life.observe("preempted", PREEMPTED, 1796126718.0065)
    assert isinstance(start, StartDrain)
    assert start.drain_id in ("20261201T120518.006Z", "20261201T120518.007Z")  # float rounding


def test_newcomers_are_admitted_for_confirmed_events_only_or_until_the_deadline_when_unheard() -> None:
    life = drained_lifecycle()
    assert life.admits_newcomers(1010.0, unconfirmed_until=1020.0)  # heard in this run
    restored = Lifecycle(events={"maintenance-event": life.events["maintenance-event"]})
    restored.events["maintenance-event"].confirmed = False
    assert not restored.admits_newcomers(1010.0, unconfirmed_until=1020.0)  # waiting for an answer
    assert restored.admits_newcomers(1020.0, unconfirmed_until=1020.0)  # unheard: carry on as planned
    assert not restored.admits_newcomers(1300.0, unconfirmed_until=1020.0)  # unheard, past the deadline
    restored.observe("maintenance-event", TERMINATE, 1030.0)  # the metadata server confirms it
    assert restored.events["maintenance-event"].confirmed
    assert restored.admits_newcomers(1301.0, unconfirmed_until=1020.0)


def test_when_time_alone_next_changes_the_admission_of_newcomers() -> None:
    """The loop sleeps until then: the end of the confirmation wait, then the unheard event's deadline."""
    life = drained_lifecycle()
    assert (
        life.admission_changes(1010.0, unconfirmed_until=1020.0) is None
    )  # heard: only an answer changes it
    restored = Lifecycle(events={"maintenance-event": life.events["maintenance-event"]})
    restored.events["maintenance-event"].confirmed = False
    deadline = restored.events["maintenance-event"].deadline
    assert deadline is not None
    assert deadline > 1020.0
    assert restored.admission_changes(1010.0, unconfirmed_until=1020.0) == 1020.0
    assert restored.admission_changes(1020.0, unconfirmed_until=1020.0) == deadline
    assert restored.admission_changes(deadline, unconfirmed_until=1020.0) is None  # past both
    assert Lifecycle().admission_changes(1010.0, unconfirmed_until=1020.0) is None  # no event


def test_a_drain_whose_events_all_cleared_admits_nobody() -> None:
    life = Lifecycle()
    life.observe("maintenance-event", TERMINATE, 1000.0)
    life.observe("maintenance-event", None, 1001.0)  # cancelling
    assert life.drain is not None
    assert not life.admits_newcomers(1002.0, unconfirmed_until=0.0)
    assert Lifecycle().admits_newcomers(1002.0, unconfirmed_until=0.0)  # no event, no drain: no restriction


def test_restored_from_the_state_file() -> None:
    """Events unconfirmed, an old event's deadline from the default grace, the drain resumed as a copy."""
    event = Event("ev", "maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE", 100.0, confirmed=True)
    drain = ActiveDrain(["ev"], 101.0, 350.0, cancelling=True)
    life = Lifecycle.restored([event], drain, None, default_grace=250.0)
    restored = life.events["maintenance-event"]
    assert (restored.deadline, restored.confirmed) == (350.0, False)
    assert life.drain == ActiveDrain(["ev"], 101.0, 350.0, drain_id=drain.drain_id)  # not cancelling
    assert life.drain is not drain
    assert life.drain.event_ids is not drain.event_ids
    assert restored is not event
    assert life.state is DaemonState.DRAINING


def test_a_restored_drain_whose_events_all_cleared_is_over() -> None:
    drain = ActiveDrain(["gone"], 101.0, 401.0)
    life = Lifecycle.restored([], drain, None)
    assert life.drain is None
    assert life.last_outcome == "cancelled"
    assert life.state is DaemonState.IDLE


def test_a_rehearsal_that_would_have_timed_out_leaves_the_daemon_drained() -> None:
    life = Lifecycle()
    life.observe("maintenance-event", TERMINATE, now=1000.0)
    life.drain_finished("timed_out", 1300.0, rehearsed=True)
    assert (life.state, life.last_outcome) == (DaemonState.DRAINED, "timed_out")
    again = Lifecycle.restored(life.events.values(), None, life.last_outcome, rehearsed=life.rehearsed)
    assert again.state is DaemonState.DRAINED
    real = Lifecycle.restored(life.events.values(), None, life.last_outcome)
    assert real.state is DaemonState.TIMED_OUT  # the same outcome for real is the daemon's state


def test_the_drain_event_is_the_first_the_drain_serves_else_the_first_on() -> None:
    life = Lifecycle()
    assert life.drain_event() is None
    life.observe("maintenance-event", TERMINATE, now=0.0)
    life.drain_finished("exited", now=1.0)
    life.observe("preempted", PREEMPTED, now=2.0)  # a new event: a drain of its own
    assert life.drain is not None
    event = life.drain_event()
    assert event is not None
    assert event.source == "preempted"
    life.drain_finished("exited", now=3.0)
    event = life.drain_event()
    assert event is not None
    assert event.source == "maintenance-event"  # no drain: the first event on
