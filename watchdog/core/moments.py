"""The moments of the daemon's story, as data: what the loop tells every output once it has acted.

The loop acts (hands a drain over, moves a deadline, cancels), queues the state file's write, and only then
emits the moment. Each output (the history, the log, the metrics, the webhooks, the site hooks:
`daemon/telling.py`) subscribes and says it in its own form, so a moment is defined once here and told by
each output alone. The lifecycle's own actions (`EventStarted`, `MoveDeadline`, `CancelDrain`,
`EventCleared`) are moments as they are; a `StartDrain` is told as the `DrainStarted` it became. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeAlias

from watchdog.core.drain_record import DrainRecord, SignalResult
from watchdog.core.ladder import Ladder
from watchdog.core.lifecycle import (
    Action,
    ActiveDrain,
    CancelDrain,
    Event,
    EventCleared,
    EventStarted,
    MoveDeadline,
    StartDrain,
)
from watchdog.core.process import ProcessIdentity
from watchdog.core.workload import Workload

RETRY, RESUMED = "retry", "resumed"  # the causes of a drain that no event started just now


@dataclass(frozen=True)
class DaemonStarted:
    state: str  # the lifecycle's state as restored
    patterns: tuple[str, ...]  # the device globs it watches


@dataclass(frozen=True)
class DrainStarted:
    """The lifecycle's drain was handed over: `cause` is the source of the event it serves, RESUMED (a
    drain on file goes on after a restart, with its deadline) or RETRY (a failed attempt, started again:
    the same drain, already told)."""

    cause: str
    deadline: float  # wall clock
    now: float  # wall clock: when it was handed over (a resumed drain's line says its time left)


@dataclass(frozen=True)
class HoldersFound:
    """The drain has its holders (the first wave, or its first scan) and signals them now (said by the
    drain as it has them, before the signals it lists)."""

    cause: str  # as DrainStarted's
    drain_id: str
    late: bool  # reopened for a late arrival
    holders: int  # how many hold a device
    fresh: int  # of them, not signalled before: they get the ladder's asking signal now
    ladder: Ladder
    dry_run: bool
    started_wall: float | None  # when the drain began (a resumed or reopened one: before now)
    deadline: float  # wall clock
    now: float  # wall clock


@dataclass(frozen=True)
class ProcessSignalled:
    """One signal of a drain's wave, once the wave is out (said by the drain): what became of
    it, and who the process is."""

    identity: ProcessIdentity
    process: str  # its name ("" when unknown)
    signum: int
    result: SignalResult
    drain_id: str
    event_ids: tuple[str, ...]
    late: bool  # a late arrival
    workload: Workload | None  # its unit, container or pod
    dry_run: bool  # nothing left the daemon: signal 0 checked the process was there


@dataclass(frozen=True)
class DrainProgress:
    """A drain in progress, every PROGRESS_INTERVAL: so a long grace is never silent."""

    record: DrainRecord | None  # the latest published copy (None: none yet)
    deadline: float  # wall clock
    drain_id: str
    now: float  # wall clock


@dataclass(frozen=True)
class DrainEnded:
    record: DrainRecord  # its outcome set (a reopened drain's joined one)
    event: Event | None  # the event it served
    drain: ActiveDrain | None  # the lifecycle's drain as it was when it ended (None: the lifecycle had none)
    state: str  # the lifecycle's state after it
    deadline: float | None  # the lifecycle's drain deadline after it (a new drain's), for the hook
    entry: Mapping[str, object]  # the drain as the history keeps it (store/drain_entry.py), built once at
    # its end from `record`: the history writes it, and the journal, /status and the webhooks render it

    @property
    def drain_id(self) -> str:
        return self.drain.drain_id if self.drain is not None else ""


Moment: TypeAlias = (
    DaemonStarted
    | EventStarted
    | DrainStarted
    | HoldersFound
    | ProcessSignalled
    | MoveDeadline
    | CancelDrain
    | EventCleared
    | DrainProgress
    | DrainEnded
)


def moment_of(action: Action, now: float) -> Moment:
    """How the loop tells an action of the lifecycle it has carried out (`now`: wall clock)."""
    if isinstance(action, StartDrain):
        return DrainStarted(action.event.source, action.deadline, now)
    return action
