"""The daemon state machine: which events are active, when a drain starts, moves its deadline, is cancelled.

Pure: it is told, per source, whether the policy wants a drain (a `Trigger`) or not (`None`), and how drains
ended; it answers with actions for the edge to carry out. Times are wall-clock seconds passed in by the
caller, because deadlines are persisted and must mean the same thing after a restart.

Rules (the product's promises):
- An event is one episode of a source asking for a drain: it starts when the source starts triggering and
  ends when it stops. A value change within an episode (e.g. MIGRATE -> TERMINATE when both drain) is the
  same event.
- One drain per event: an event covered by a drain is never drained again, across restarts too (the state
  is persisted and restored); a new episode after the source cleared drains again.
- At most one drain at a time. An event that starts during a drain joins it: the deadline can only move
  earlier (a preemption during a maintenance drain shortens it), never later.
- When none of a running drain's events is still active, the drain is cancelled (no SIGKILL).
- A drain ends when its holders are gone, but its events may go on: a process that opens a device while
  they do (a job supervisor restarting the job) joins that drain, reopened (`late_arrivals`): the same id,
  the same start, the deadline of the events it serves. One event is one drain. The reopened drain's
  outcome is the more telling of its ends (`joined_outcome`). Once the events clear, nobody new is
  signalled.
- Events restored from the state file are unconfirmed until a metadata answer in this run says they are
  still on (`confirmed`): the edge signals nobody new for them until then (see `Daemon.admits_newcomers`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from watchdog.core.clock import utc_time
from watchdog.core.vocabulary import DEFAULT_MAINTENANCE_GRACE, DaemonState, Outcome

# How a finished drain's outcome shows as the daemon's state while its events are still active.
_STATE_AFTER = {
    Outcome.EXITED.value: DaemonState.DRAINED,
    Outcome.NO_HOLDERS.value: DaemonState.DRAINED,
    Outcome.TIMED_OUT.value: DaemonState.TIMED_OUT,
    Outcome.CANCELLED.value: DaemonState.CANCELLED,
}


@dataclass(frozen=True)
class Trigger:
    """A source asks for a drain: the value it saw and the grace it allows."""

    source: str
    value: str
    grace: float


@dataclass
class Event:
    """One episode of a source asking for a drain, and the deadline its grace gives it."""

    event_id: str
    source: str
    value: str
    first_seen: float
    drained: bool = False
    deadline: float | None = None  # first_seen + the grace of its trigger
    confirmed: bool = True  # False when restored from the state file, until this run hears it again


@dataclass
class ActiveDrain:
    """The drain in progress, as the lifecycle started it: the events it serves, when it started, when it
    must end. (What it did to which process is its `DrainRecord`; the state file keeps both.)"""

    event_ids: list[str]
    started: float
    deadline: float
    cancelling: bool = False  # asked to stop: a new event waits for it to end, then gets its own drain
    late: bool = False  # reopened for late arrivals: it had ended, its events had not
    drain_id: str = ""

    def __post_init__(self) -> None:
        if not self.drain_id:
            self.drain_id = drain_id_at(self.started)


def drain_id_at(started: float) -> str:
    """A drain's id, readable and unique per host: its start in UTC to the millisecond."""
    whole = int(started)
    millis = min(999, round((started - whole) * 1000))
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(whole)) + f".{millis:03d}Z"


def event_id_at(source: str, value: str, first_seen: float) -> str:
    """An event's id, readable: `preempted:TRUE@2026-12-01T16:31:03.006Z`. Ids are opaque once made: one
    loaded from an older state file (`preempted:TRUE@1796126718.006`) is kept and matched as it is."""
    return f"{source}:{value}@{utc_time(first_seen)}"


@dataclass(frozen=True)
class EventStarted:
    event: Event


@dataclass(frozen=True)
class EventCleared:
    event: Event


@dataclass(frozen=True)
class StartDrain:
    event: Event
    started: float
    deadline: float
    late: bool = False
    drain_id: str = ""


@dataclass(frozen=True)
class MoveDeadline:
    deadline: float
    because: Event


@dataclass(frozen=True)
class CancelDrain:
    reason: str


Action = EventStarted | EventCleared | StartDrain | MoveDeadline | CancelDrain

# How telling an end is, for a drain reopened for late arrivals: its outcome is the first end's, unless a
# later end is more telling (a late arrival killed at the deadline: timed_out). A reopened drain cancelled
# (the event cleared) or interrupted (the daemon stopped: it resumes) leaves the first end's.
_TELLING = {Outcome.NO_HOLDERS.value: 0, Outcome.EXITED.value: 1, Outcome.TIMED_OUT.value: 2}


def joined_outcome(first: str | None, then: str) -> str:
    """The outcome of a drain that ended as `first` (None: it had not ended) and, reopened, as `then`."""
    if first is None:
        return then
    if _TELLING.get(then, -1) > _TELLING.get(first, -1):
        return then
    return first


@dataclass
class Lifecycle:
    events: dict[str, Event] = field(default_factory=dict)  # by source
    drain: ActiveDrain | None = None
    last_outcome: str | None = None  # of the last drain (of the running one, if reopened: its first end)
    rehearsed: bool = False  # the last drain was a dry run: its outcome is not the daemon's state
    ended: ActiveDrain | None = None  # the last drain that ended while its events are on: a late arrival
    ended_at: float | None = None  # joins it (`late_arrivals`); when it (first) ended

    @classmethod
    def restored(
        cls,
        events: Iterable[Event],
        drain: ActiveDrain | None,
        last_outcome: str | None,
        default_grace: float = DEFAULT_MAINTENANCE_GRACE,
        rehearsed: bool = False,
        ended: ActiveDrain | None = None,
        ended_at: float | None = None,
    ) -> Lifecycle:
        """The lifecycle a state file describes: its events unconfirmed (and, from files written before
        events had deadlines, `default_grace` after they were first seen). A drain none of whose events is
        still active was being cancelled when the daemon stopped: it is over (cancelled), not resumed.
        `ended`: the drain that had ended while its events were on, which a late arrival joins."""
        life = cls(last_outcome=last_outcome, rehearsed=rehearsed)
        for e in events:
            deadline = e.deadline if e.deadline is not None else e.first_seen + default_grace
            life.events[e.source] = replace(e, deadline=deadline, confirmed=False)
        if drain is None and ended is not None and life._serves(ended):
            life.ended, life.ended_at = replace(ended, event_ids=list(ended.event_ids)), ended_at
        if drain is not None:
            if {e.event_id for e in life.events.values()}.intersection(drain.event_ids):
                life.drain = replace(drain, event_ids=list(drain.event_ids), cancelling=False)
            else:
                life.last_outcome = Outcome.CANCELLED.value
        return life

    @property
    def state(self) -> DaemonState:
        if self.drain is not None:
            return DaemonState.DRAINING
        if self.events and self.last_outcome is not None:
            if self.rehearsed:
                return DaemonState.DRAINED  # a rehearsal's outcome is what it would have been, not a state
            return _STATE_AFTER.get(self.last_outcome, DaemonState.DRAINED)
        return DaemonState.IDLE

    def drain_event(self) -> Event | None:
        """The event the current drain serves (its first), else the first event on: what a notice names."""
        served = set(self.drain.event_ids) if self.drain is not None else set()
        return next(iter(sorted(self.events.values(), key=lambda e: e.event_id not in served)), None)

    def observe(self, source: str, trigger: Trigger | None, now: float) -> list[Action]:
        """The policy's current verdict for one source; returns what to do about it."""
        current = self.events.get(source)
        if trigger is None:
            return self._clear(current) if current is not None else []
        if current is not None:
            current.value = trigger.value
            current.confirmed = True
            if current.deadline is not None and now + trigger.grace < current.deadline:
                current.deadline = now + trigger.grace  # a value with a shorter grace: the event's too
            return self._maybe_move(current, now + trigger.grace)
        event = Event(event_id_at(source, trigger.value, now), source, trigger.value, now, False,
                      now + trigger.grace)  # fmt: skip
        self.events[source] = event
        actions: list[Action] = [EventStarted(event)]
        if self.drain is None:
            actions.extend(self._start([event], now))
        elif not self.drain.cancelling:
            self.drain.event_ids.append(event.event_id)
            actions.extend(self._maybe_move(event, now + trigger.grace))
        # else: the running drain is being cancelled; this event gets its own drain when it has ended.
        return actions

    def drain_finished(self, outcome: str, now: float, rehearsed: bool = False) -> list[Action]:
        """The drain engine is done. Its events are covered: they never drain again. An event that
        started while the drain was being cancelled gets its own drain now. `rehearsed`: it was a dry
        run (the daemon is `drained`, whatever the rehearsal's outcome)."""
        if self.drain is None:
            return []
        covered = set(self.drain.event_ids)
        for event in self.events.values():
            if event.event_id in covered:
                event.drained = True
        ended, first = self.drain, self.last_outcome if self.drain.late else None
        self.drain = None
        self.last_outcome, self.rehearsed = joined_outcome(first, outcome), rehearsed
        if not ended.late or self.ended_at is None:  # a reopened drain keeps its first end's time
            self.ended_at = now
        self.ended = replace(ended, cancelling=False, late=False)
        if not self._serves(self.ended):  # its events are over (it was cancelled): nobody joins it
            self.ended, self.ended_at = None, None
        return self.start_waiting(now)

    def start_waiting(self, now: float) -> list[Action]:
        """A drain for the active events no drain has covered yet (none if a drain is running)."""
        waiting = [e for e in self.events.values() if not e.drained]
        return self._start(waiting, now) if waiting and self.drain is None else []

    def late_arrivals(self, now: float) -> list[Action]:
        """A process holds a device while drained events are still on: it joins their drain, reopened
        (same id, same start), with the deadline of those events (nothing if a drain is running or no
        event is on). The drain keeps its first end's outcome until it ends again (`drain_finished`)."""
        if self.drain is not None or not self.events:
            return []
        if any(not e.drained for e in self.events.values()):
            return self.start_waiting(now)  # an event no drain has covered: its own first drain
        events = list(self.events.values())
        deadline = min(e.deadline if e.deadline is not None else now for e in events)
        first = min(events, key=lambda e: e.first_seen)
        ended = self.ended
        if ended is None or not self._serves(ended):  # a file of an older version: a drain of its own
            outcome = self.last_outcome
            actions = self._start(events, now, late=True)
            self.last_outcome = outcome
            return actions
        ids = list(ended.event_ids) + [e.event_id for e in events if e.event_id not in ended.event_ids]
        self.drain = replace(ended, event_ids=ids, deadline=deadline, cancelling=False, late=True)
        return [StartDrain(first, ended.started, deadline, True, ended.drain_id)]

    def admits_newcomers(self, now: float, unconfirmed_until: float) -> bool:
        """Whether a drain (or the late-arrival watch) may signal processes nobody signalled before: yes for
        an event heard in this run; for one restored from the state file, no until `unconfirmed_until`
        (start + the confirmation wait), then yes until its deadline (metadata unheard: the maintenance is
        most likely still coming). A drain whose events have all cleared signals nobody new."""
        events = self._admitting()
        if not events:
            return self.drain is None
        if any(e.confirmed for e in events):
            return True
        return unconfirmed_until <= now < _unheard_until(events)

    def admission_changes(self, now: float, unconfirmed_until: float) -> float | None:
        """When time alone next changes `admits_newcomers` (a wall time after `now`), or None: only an
        answer of the metadata server, or a change of the events, can."""
        events = self._admitting()
        if not events or any(e.confirmed for e in events):
            return None
        return min((t for t in (unconfirmed_until, _unheard_until(events)) if t > now), default=None)

    def _admitting(self) -> list[Event]:
        """The events whose confirmation admits newcomers: those the running drain serves, else all."""
        served = set(self.drain.event_ids) if self.drain is not None else None
        return [e for e in self.events.values() if served is None or e.event_id in served]

    def _serves(self, drain: ActiveDrain) -> bool:
        """Whether an event `drain` served is still on."""
        return bool({e.event_id for e in self.events.values()}.intersection(drain.event_ids))

    def _start(self, events: list[Event], now: float, late: bool = False) -> list[Action]:
        deadline = min(e.deadline if e.deadline is not None else now for e in events)
        self.drain = ActiveDrain([e.event_id for e in events], now, deadline, late=late)
        self.last_outcome, self.ended, self.ended_at = None, None, None
        first = min(events, key=lambda e: e.first_seen)
        return [StartDrain(first, now, deadline, late, self.drain.drain_id)]

    def _maybe_move(self, event: Event, deadline: float) -> list[Action]:
        if (
            self.drain is None
            or event.event_id not in self.drain.event_ids
            or deadline >= self.drain.deadline
        ):
            return []
        self.drain.deadline = deadline
        return [MoveDeadline(deadline, event)]

    def _clear(self, event: Event) -> list[Action]:
        del self.events[event.source]
        actions: list[Action] = [EventCleared(event)]
        if self.drain is not None:
            live = {e.event_id for e in self.events.values()}
            if not live.intersection(self.drain.event_ids) and not self.drain.cancelling:
                self.drain.cancelling = True
                actions.append(CancelDrain(f"{event.source} went back to normal ({event.value} cleared)"))
        if self.ended is not None and not self._serves(self.ended):
            self.ended, self.ended_at = None, None  # its events are over: nobody joins it any more
        if not self.events and self.drain is None:
            self.last_outcome = None
        return actions


def _unheard_until(events: list[Event]) -> float:
    """Until when unconfirmed `events` are taken as still on: the earliest of their deadlines."""
    return min(e.deadline if e.deadline is not None else e.first_seen for e in events)
