"""What the state file holds: the lifecycle's own events and drain, and the signals sent, in a JSON form
that rejects wrong shapes.

Pure. `from_json` raises `StateFormatError` naming the field and what was wrong, so the store can log why
it set a file aside. Times are wall-clock seconds (the file outlives the process and its monotonic clock).
"""

from __future__ import annotations

import enum
import math
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from watchdog.core.lifecycle import ActiveDrain, Event
from watchdog.core.process import ProcessIdentity
from watchdog.core.text import valid_text
from watchdog.core.vocabulary import (
    DEFAULT_ON_TIMEOUT,
    ON_TIMEOUT,
    DaemonState,
    OnTimeout,
    SigtermDisposition,
    as_on_timeout,
    disposition_of,
)

FORMAT = "tpu-watchdog-state"
VERSION = 1


class StateFormatError(ValueError):
    """The JSON does not have the shape of our state; the message names the field."""


def plain(value: object) -> object:
    """A str-valued enum as its value (`SignalResult.SENT` -> "sent"); anything else unchanged."""
    return value.value if isinstance(value, enum.Enum) else value


def signal_name(signum: int | str) -> str:
    """ "SIGTERM" for 15, signal.SIGTERM or "SIGTERM"; ValueError for anything else."""
    if isinstance(signum, str):
        if signum not in signal.Signals.__members__:
            raise ValueError(f"{signum!r} is not a signal name")
        return signum
    return signal.Signals(signum).name


class _Reader:
    """Typed access to one JSON object, with the field path in every error."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, Mapping):
            raise StateFormatError(f"{where or 'the file'}: expected an object, got {type(data).__name__}")
        self.data = data
        self.where = where

    def _get(self, name: str) -> object:
        if name not in self.data:
            raise StateFormatError(f"{self._path(name)}: missing")
        return self.data[name]

    def _path(self, name: str) -> str:
        return f"{self.where}.{name}" if self.where else name

    def _fail(self, name: str, expected: str, value: object) -> StateFormatError:
        return StateFormatError(f"{self._path(name)}: expected {expected}, got {value!r:.60}")

    def string(self, name: str, *, empty: bool = False) -> str:
        value = self._get(name)
        if not isinstance(value, str) or (not empty and not value):
            raise self._fail(name, "a non-empty string" if not empty else "a string", value)
        return valid_text(value)  # a process name that was not UTF-8 comes back escaped (core.text)

    def integer(self, name: str, minimum: int = 0) -> int:
        value = self._get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self._fail(name, f"an integer >= {minimum}", value)
        return value

    def time(self, name: str) -> float:
        value = self._get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._fail(name, "a number", value)
        try:
            number = float(value)  # JSON allows integers too large for a float: OverflowError
        except OverflowError:
            raise self._fail(name, "a number", value) from None
        if not math.isfinite(number):
            raise self._fail(name, "a number", value)
        return number

    def optional_time(self, name: str) -> float | None:
        return None if self._get(name) is None else self.time(name)

    def signal(self, name: str) -> str:
        value = self.string(name)
        try:
            return signal_name(value)
        except ValueError:
            raise self._fail(name, "a signal name such as SIGTERM", value) from None

    def child(self, name: str, *, optional: bool = False) -> _Reader | None:
        value = self._get(name)
        if value is None and optional:
            return None
        return _Reader(value, self._path(name))

    def items(self, name: str) -> list[_Reader]:
        value = self._get(name)
        if not isinstance(value, list):
            raise self._fail(name, "a list", value)
        return [_Reader(item, f"{self._path(name)}[{i}]") for i, item in enumerate(value)]


def event_to_json(event: Event) -> dict[str, object]:
    """An active event as the file keeps it (`confirmed` is not kept: a restart must hear it again)."""
    return {
        "source": event.source,
        "value": event.value,
        "id": event.event_id,
        "first_seen": event.first_seen,
        "drained": event.drained,
        "deadline": event.deadline,
    }


def event_from_json(data: object, where: str = "event") -> Event:
    """An event from the file, unconfirmed. Files written before events had deadlines have none."""
    r = _Reader(data, where)
    drained = r.data.get("drained", False)
    if not isinstance(drained, bool):
        raise StateFormatError(f"{where}.drained: expected true or false, got {drained!r:.60}")
    deadline = r.optional_time("deadline") if "deadline" in r.data else None
    source, value, event_id = r.string("source"), r.string("value", empty=True), r.string("id")
    return Event(event_id, source, value, r.time("first_seen"), drained, deadline, confirmed=False)


def drain_to_json(drain: ActiveDrain, on_timeout: OnTimeout) -> dict[str, object]:
    """The drain in progress as the file keeps it. `phase` and `grace` are derived, and written so that the
    file reads as it always has (an older version requires them); `cancelling` is not kept (see
    `Lifecycle.restored`)."""
    return {
        "event_ids": list(drain.event_ids),
        "phase": DaemonState.DRAINING.value,
        "started_at": drain.started,
        "deadline_at": drain.deadline,
        "grace": drain.deadline - drain.started,
        "on_timeout": on_timeout,
        "late": drain.late,
        "id": drain.drain_id,
    }


def drain_from_json(data: object, where: str = "drain") -> tuple[ActiveDrain, OnTimeout]:
    """The drain in progress and what its deadline does. `phase` and `grace` are checked, then left: the
    deadline says it all. Files written before drains had ids or late arrivals lack `id` and `late`."""
    r = _Reader(data, where)
    text = r.string("on_timeout")
    try:
        on_timeout = as_on_timeout(text)
    except ValueError:
        allowed = " or ".join(ON_TIMEOUT)
        raise StateFormatError(f"{where}.on_timeout: expected {allowed}, got {text!r:.60}") from None
    ids = r.data.get("event_ids", [])
    if not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids):
        raise StateFormatError(f"{where}.event_ids: expected a list of event ids, got {ids!r:.60}")
    late = r.data.get("late", False)
    if not isinstance(late, bool):
        raise StateFormatError(f"{where}.late: expected true or false, got {late!r:.60}")
    drain_id = r.string("id", empty=True) if "id" in r.data else ""  # "": derived from its start
    r.string("phase")
    started, deadline = r.time("started_at"), r.time("deadline_at")
    r.time("grace")
    return ActiveDrain(list(ids), started, deadline, late=late, drain_id=drain_id), on_timeout


class Intent(NamedTuple):
    """A signal about to go to a process, written ahead: who, which, its name, and its SIGTERM disposition
    as last seen (so a restart that finds it gone can still tell whether it died of SIGTERM unsaved)."""

    identity: ProcessIdentity
    signal: int | str
    name: str = ""
    sigterm: SigtermDisposition | None = None


@dataclass(frozen=True)
class SignalRecord:
    """One signal to one process, written before it is sent (`sent_at` None: it may or may not have gone)."""

    identity: ProcessIdentity
    name: str
    signal: str  # "SIGTERM" | "SIGKILL" | ...
    intent_at: float
    sent_at: float | None = None
    result: str | None = None  # a SignalResult value once known
    sigterm: SigtermDisposition | None = None  # the process's SIGTERM disposition when the intent was written

    @property
    def confirmed(self) -> bool:
        return self.sent_at is not None

    def to_json(self) -> dict[str, object]:
        return {
            "pid": self.identity.pid,
            "start_time": self.identity.start_time,
            "name": self.name,
            "signal": self.signal,
            "intent_at": self.intent_at,
            "sent_at": self.sent_at,
            "result": self.result,
            "sigterm": None if self.sigterm is None else self.sigterm.value,
        }

    @classmethod
    def from_json(cls, data: object, where: str) -> SignalRecord:
        r = _Reader(data, where)
        result = r.data.get("result")
        if result is not None and not isinstance(result, str):
            raise StateFormatError(f"{where}.result: expected a string or null, got {result!r:.60}")
        identity = ProcessIdentity(r.integer("pid", minimum=1), r.integer("start_time"))
        sigterm = r.data.get("sigterm")  # absent in a file of an older version
        if sigterm is not None and not isinstance(sigterm, str):
            raise StateFormatError(f"{where}.sigterm: expected a string or null, got {sigterm!r:.60}")
        return cls(
            identity, r.string("name", empty=True), r.signal("signal"), r.time("intent_at"),
            r.optional_time("sent_at"), result, disposition_of(sigterm),
        )  # fmt: skip


@dataclass(frozen=True)
class ExitRecord:
    """How a signalled process stopped holding its device, as a run saw it: exited (its exit status when
    it could be read) or released the device, and when. Written behind, never waited for: a run that
    resumes the drain after a restart tells that end with its time and status, not as unseen."""

    identity: ProcessIdentity
    end: str  # "exited" | "released" (an `End` value)
    at: float  # wall clock
    code: int | None = None  # the exit code, when it was read
    signal: int | None = None  # the signal that killed it, when it was read

    def to_json(self) -> dict[str, object]:
        return {
            "pid": self.identity.pid,
            "start_time": self.identity.start_time,
            "end": self.end,
            "at": self.at,
            "code": self.code,
            "signal": self.signal,
        }

    @classmethod
    def from_json(cls, data: object, where: str) -> ExitRecord:
        r = _Reader(data, where)
        identity = ProcessIdentity(r.integer("pid", minimum=1), r.integer("start_time"))
        end = r.string("end")
        if end not in EXIT_ENDS:
            raise StateFormatError(f"{where}.end: expected one of {', '.join(EXIT_ENDS)}, got {end!r:.60}")
        code = None if r.data.get("code") is None else r.integer("code")
        signum = None if r.data.get("signal") is None else r.integer("signal", minimum=1)
        return cls(identity, end, r.time("at"), code, signum)


EXIT_ENDS = ("exited", "released")  # the ends an `ExitRecord` keeps: those a restarted run cannot see


@dataclass(frozen=True)
class SavedState:
    """Everything the daemon must remember across a restart of itself (not of the machine: see boot_id),
    as the file says it: the lifecycle's events and drain (copies, as a reload gives them back), and the
    signals sent. `on_timeout` is what the drain's deadline does, kept with the drain for `status` (the
    default when there is no drain)."""

    boot_id: str
    events: tuple[Event, ...] = ()
    drain: ActiveDrain | None = None
    last_outcome: str | None = None  # of the last drain, while its events are still active
    signals: tuple[SignalRecord, ...] = field(default=())  # of the current (or last) drain
    on_timeout: OnTimeout = DEFAULT_ON_TIMEOUT
    last_dry_run: bool = False  # the last drain was a rehearsal (absent from files of older versions)
    ended_drain: ActiveDrain | None = None  # the drain that ended while its events are on: a late arrival
    ended_at: float | None = None  # joins it after a restart too; when it (first) ended (absent: older files)
    exits: tuple[ExitRecord, ...] = ()  # how the signalled processes ended, as seen (absent: older files)

    @property
    def empty(self) -> bool:
        return not self.events and self.drain is None and not self.signals

    def find(self, identity: ProcessIdentity, signum: int | str) -> SignalRecord | None:
        """The record of `signum` to `identity` in this event (sent or only intended), if any."""
        name = signal_name(signum)
        return next((s for s in self.signals if s.identity == identity and s.signal == name), None)

    def unconfirmed(self) -> tuple[SignalRecord, ...]:
        """Signals written as intended but never marked sent: a crash came between. Treat as possibly sent."""
        return tuple(s for s in self.signals if not s.confirmed)

    def with_exits(self, exits: Iterable[ExitRecord]) -> SavedState:
        """This state with each of `exits` replacing the one for the same process (or added)."""
        by_process = {e.identity: e for e in (*self.exits, *exits)}
        return replace(self, exits=tuple(by_process.values()))

    def with_signal(self, record: SignalRecord) -> SavedState:
        """This state with `record` replacing the one for the same process and signal (or added)."""
        others = tuple(s for s in self.signals if (s.identity, s.signal) != (record.identity, record.signal))
        return replace(self, signals=(*others, record))

    def to_json(self, written_at: float) -> dict[str, object]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "written_at": written_at,
            "boot_id": self.boot_id,
            "events": [event_to_json(e) for e in self.events],
            "drain": drain_to_json(self.drain, self.on_timeout) if self.drain else None,
            "last_outcome": self.last_outcome,
            "last_dry_run": self.last_dry_run,
            "ended_drain": drain_to_json(self.ended_drain, self.on_timeout) if self.ended_drain else None,
            "ended_at": self.ended_at,
            "signals": [s.to_json() for s in self.signals],
            "exits": [e.to_json() for e in self.exits],
        }

    @classmethod
    def from_json(cls, data: object) -> SavedState:
        r = _Reader(data, "")
        if r.data.get("format") != FORMAT:
            raise StateFormatError(
                f"format: expected {FORMAT!r}, got {r.data.get('format')!r:.60}: not our file"
            )
        version = r.data.get("version")
        if isinstance(version, bool) or version != VERSION:  # true == 1 in Python, not in our format
            raise StateFormatError(f"version: expected {VERSION}, got {r.data.get('version')!r:.60}")
        drain = r.child("drain", optional=True)
        outcome = r.data.get("last_outcome")
        if outcome is not None and not isinstance(outcome, str):
            raise StateFormatError(f"last_outcome: expected a string or null, got {outcome!r:.60}")
        last_dry_run = r.data.get("last_dry_run", False)
        if not isinstance(last_dry_run, bool):
            raise StateFormatError(f"last_dry_run: expected true or false, got {last_dry_run!r:.60}")
        boot_id = r.string("boot_id")
        events = tuple(event_from_json(e.data, e.where) for e in r.items("events"))
        active, on_timeout = drain_from_json(drain.data, "drain") if drain else (None, DEFAULT_ON_TIMEOUT)
        ended = r.child("ended_drain", optional=True) if "ended_drain" in r.data else None
        ended_drain = drain_from_json(ended.data, "ended_drain")[0] if ended else None
        ended_at = r.optional_time("ended_at") if "ended_at" in r.data else None
        on_file = r.items("exits") if "exits" in r.data else []  # absent in a file of an older version
        exits = tuple(ExitRecord.from_json(e.data, e.where) for e in on_file)
        return cls(
            boot_id=boot_id,
            events=events,
            drain=active,
            last_outcome=outcome,
            signals=tuple(SignalRecord.from_json(s.data, s.where) for s in r.items("signals")),
            on_timeout=on_timeout,
            last_dry_run=last_dry_run,
            ended_drain=ended_drain,
            ended_at=ended_at,
            exits=exits,
        )
