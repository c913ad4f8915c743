"""One drain as the history keeps it: plain JSON data, the same shape in the file, in `history --json` and in
`/status` (`recent_drains`, `last_drain`). Pure but for naming a uid (pwd).

Every entry renders one `DrainRecord` (its id, event, start, deadline, what it did) and the host it ran on.
The record is known from three places: its start (`open_entry`: a record with nothing done yet), its run
(`entry_from_record`, with the signals the state file kept from before a restart), or only the state file
(`entry_from_saved`: the daemon died and the drain cannot be finished, e.g. the host rebooted).
Times are RFC 3339 UTC; per process, offsets in seconds from the drain's start; a rehearsal's signals are
`would_send` (`signals` stays empty: nothing was sent). `end` is one of `ENDS`; `exit_status`/`exit_signal`
are null where they cannot be known (a process that is not the daemon's child leaves no exit status to
read); `sigterm` is the disposition seen before the signal, from which such a process's death of SIGTERM's
default action is inferred (`detail`).
An entry written before a field existed lacks it: readers take a missing field as null.
"""

from __future__ import annotations

import functools
import pwd
from collections.abc import Callable, Mapping, Sequence

from watchdog.core.clock import utc_text
from watchdog.core.drain_record import (
    INFERRED_DEATH,
    Death,
    DrainRecord,
    End,
    ProcessRecord,
    SignalResult,
)
from watchdog.core.ladder import KILL_NAME, signal_name
from watchdog.core.process import ProcessIdentity
from watchdog.core.vocabulary import ProcessEnd
from watchdog.core.workload import Workload
from watchdog.store.records import SignalRecord

ENTRY_VERSION = 1
EXITED, KILLED, RELEASED = ProcessEnd.EXITED.value, ProcessEnd.KILLED.value, ProcessEnd.RELEASED.value
STILL_RUNNING, UNKNOWN = ProcessEnd.STILL_RUNNING.value, ProcessEnd.UNKNOWN.value  # core/vocabulary.py
ENDS = tuple(e.value for e in ProcessEnd)  # unknown: the daemon could not see how it ended
NO_HANDLER = "died of SIGTERM's default action: it had no handler, so it saved no checkpoint"
SIGTERM_DEATHS = (NO_HANDLER, INFERRED_DEATH)  # the details of a process that died of SIGTERM's default
_DETAIL = {
    End.GONE: "gone before it was signalled",
    End.IDENTITY_CHANGED: "its PID was reused before the signal: never signalled",
    End.PROTECTED: "PID 1, the watchdog itself or a kernel thread: never signalled",
}

Alive = Callable[[ProcessIdentity], bool]


@functools.lru_cache(maxsize=256)
def user_name(uid: int | None) -> str | None:
    """The login name of `uid` (its number when it has none; None when the uid is not known)."""
    if uid is None:
        return None
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


Host = Mapping[str, str]  # who the host is (core/identity.py host_fields: the known ones; {}: not known)


def open_entry(record: DrainRecord, host: Host) -> dict[str, object]:
    """A drain that has just started: written at once, so a crash or a reboot mid-drain leaves a trace."""
    return _entry(record, host, outcome=None, ended=None, processes=[], notes=[])


def entry_from_record(
    record: DrainRecord,
    host: Host,
    on_file: Sequence[SignalRecord] = (),
    alive: Alive | None = None,
) -> dict[str, object]:
    """A finished drain. `on_file`: the state file's signals (a resumed drain's record has no time for the
    signals an earlier run sent, nor the processes that ended while the daemon was down; a late-arrival
    drain's file also has its event's earlier drains', which give times but are not its processes);
    `alive` tells which of those still run (they released the device) and which exited."""
    wall_of = {(s.identity, s.signal): s.sent_at or s.intent_at for s in on_file}
    processes = [_from_record(record, p, wall_of) for p in record.processes.values()]
    if record.dry_run:  # nothing was sent: what would have been is apart, so `signals` never misleads
        processes = [_would_send(p) for p in processes]
    seen = set(record.processes)
    for identity, records in _by_process([s for s in on_file if s.intent_at >= record.started_wall]).items():
        if identity in seen:
            continue
        end = RELEASED if alive is not None and alive(identity) else EXITED
        processes.append(_from_file(record, records, end, "no longer held a device when the drain resumed"))
    ended = None if record.ended is None else record.wall(record.ended)
    outcome = record.outcome.value if record.outcome else None
    return _entry(record, host, outcome=outcome, ended=ended, processes=processes, notes=list(record.notes))


def rejoined(first: Mapping[str, object], entry: dict[str, object]) -> dict[str, object]:
    """A reopened drain's entry (`entry`, from its record) over the entry of its first end (`first`): a
    process that had exited or been killed by then keeps what the first end knew of it (after a restart
    the record knows it only from the state file: its exit and times unknown); the others, and the late
    arrivals, are as the record has them now."""
    before = first.get("processes")
    if not isinstance(before, list):
        return entry
    done = {
        (p.get("pid"), p.get("start_time")): p
        for p in before
        if isinstance(p, Mapping) and p.get("end") in (EXITED, KILLED)
    }
    now = entry.get("processes")
    processes = [done.get((p.get("pid"), p.get("start_time")), p) for p in now if isinstance(p, Mapping)] \
        if isinstance(now, list) else []  # fmt: skip
    return {**entry, "processes": [dict(p) for p in processes]}


def entry_from_saved(
    record: DrainRecord, host: Host, on_file: Sequence[SignalRecord], outcome: str, ended: float, why: str,
    alive: Alive | None = None,
) -> dict[str, object]:  # fmt: skip
    """A drain that will never finish, from what the state file kept: its record as opened (`opened`) and
    its signals. `alive` None: the processes cannot be looked at (another boot): their end is unknown
    unless SIGKILL went out."""
    processes = []
    for records in _by_process(on_file).values():
        identity = records[0].identity
        if any(r.signal == KILL_NAME and r.result == SignalResult.SENT.value for r in records):
            end = KILLED
        elif alive is None:
            end = UNKNOWN
        else:
            end = STILL_RUNNING if alive(identity) else EXITED
        processes.append(_from_file(record, records, end, why))
    return _entry(record, host, outcome=outcome, ended=ended, processes=processes, notes=[why])


def _entry(
    record: DrainRecord, host: Host, *, outcome: str | None, ended: float | None,
    processes: list[dict[str, object]], notes: list[str],
) -> dict[str, object]:  # fmt: skip
    started = record.started_wall
    return {
        "version": ENTRY_VERSION,
        "id": record.drain_id,
        "host": dict(host),
        "event": {"key": record.event_key, "value": record.event_value},
        "event_ids": list(record.event_ids),
        "late": record.late,
        "dry_run": record.dry_run,
        "on_timeout": record.on_timeout,
        "started": utc_text(started),
        "deadline": utc_text(record.wall(record.deadline)),
        "ended": None if ended is None else utc_text(ended),
        "duration": None if ended is None else round(max(0.0, ended - started), 3),
        "outcome": outcome,
        "processes": processes,
        "notes": notes,
    }


def _offset(record: DrainRecord, wall: float | None) -> float | None:
    return None if wall is None else round(wall - record.started_wall, 3)


def _from_record(
    record: DrainRecord,
    proc: ProcessRecord,
    wall_of: Mapping[tuple[ProcessIdentity, str], float],
) -> dict[str, object]:
    sent: dict[str, float | None] = {}
    not_sent: dict[str, str] = {}
    for s in proc.signals:
        name = signal_name(s.signum)
        if s.result is SignalResult.SENT:
            wall = record.wall(s.at) if s.at is not None else wall_of.get((proc.identity, name))
            sent.setdefault(name, _offset(record, wall))
        else:
            not_sent.setdefault(name, s.result.value)
    status = proc.exit_status
    detail = _DETAIL.get(proc.end) if proc.end is not None else None
    end = proc.public_end(record.dry_run).value
    death = proc.sigterm_death
    if end == EXITED and death is not None:
        detail = NO_HANDLER if death is Death.SEEN else INFERRED_DEATH
    ended_after = None if proc.ended_at is None or end == STILL_RUNNING else record.wall(proc.ended_at)
    return _process(
        proc.identity, proc.name, proc.uid, list(proc.devices), sent, not_sent, end,
        _offset(record, ended_after), status.code if status else None,
        status.signal_name if status else None, proc.late_arrival, detail,
        proc.sigterm.value if proc.sigterm else None, proc.workload,
    )  # fmt: skip


def _from_file(record: DrainRecord, records: list[SignalRecord], end: str, detail: str) -> dict[str, object]:
    sent = {
        r.signal: _offset(record, r.sent_at or r.intent_at) for r in records if r.result in (None, "sent")
    }
    not_sent = {r.signal: r.result for r in records if r.result not in (None, "sent")}
    first = records[0]
    return _process(
        first.identity, first.name, None, [], sent, not_sent, end, None, None, None, False, detail, None, None
    )  # the state file does not keep the disposition nor the workload


def _process(
    identity: ProcessIdentity, name: str, uid: int | None, devices: list[str], sent: dict[str, float | None],
    not_sent: Mapping[str, str | None], end: str, ended_after: float | None, exit_status: int | None,
    exit_signal: str | None, late: bool, detail: str | None, sigterm: str | None, workload: Workload | None,
) -> dict[str, object]:  # fmt: skip
    return {
        "pid": identity.pid,
        "start_time": identity.start_time,
        "name": name,
        "user": user_name(uid),
        "uid": uid,
        "devices": devices,
        "signals": list(sent),
        "sent_after": sent,
        "would_send": [],  # a rehearsal's (dry run's) signals, never sent: `_would_send`
        "would_send_after": {},
        "not_sent": dict(not_sent),
        "end": end,
        "ended_after": ended_after,
        "exit_status": exit_status,
        "exit_signal": exit_signal,
        "late_arrival": late,
        "sigterm": sigterm,  # caught, ignored, default: as seen before the signal; null when not known
        "workload": None if workload is None else workload.to_dict(),  # core/workload.py; null: not known
        "detail": detail,
    }


def _would_send(proc: dict[str, object]) -> dict[str, object]:
    """A rehearsal's process: its signals as `would_send` (and `would_send_after`), `signals` empty."""
    return {**proc, "signals": [], "sent_after": {}, "would_send": proc["signals"],
            "would_send_after": proc["sent_after"]}  # fmt: skip


def _by_process(records: Sequence[SignalRecord]) -> dict[ProcessIdentity, list[SignalRecord]]:
    grouped: dict[ProcessIdentity, list[SignalRecord]] = {}
    for r in records:
        grouped.setdefault(r.identity, []).append(r)
    return grouped
