"""A drain in words, as `history`, `status` and `drill` print it: one block per drain, like `systemctl
status` (a headline, a few aligned facts, one line per process), never a data structure; and the sentences
the journal and the webhooks both say: an event's start and end (`event_started_line`,
`event_cleared_line`), a drain's start (`started_line`) and end (`ended_line`).

Pure. A drain's words read the plain data of `store/drain_entry.py` (from the file, or from /status as
JSON), so they are forgiving: a field that is missing or of another type is shown as `?`, never a crash. An
event's and a drain's start read the core's own `Event` and `HoldersFound`.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence

from watchdog.core.clock import time_left, utc_time
from watchdog.core.drain_record import BEFORE_RESTART, rehearsal_forecast
from watchdog.core.ladder import KILL_NAME
from watchdog.core.lifecycle import Event
from watchdog.core.moments import RESUMED, RETRY, HoldersFound
from watchdog.core.vocabulary import Outcome, disposition_of
from watchdog.core.workload import words_of
from watchdog.store.drain_entry import EXITED, KILLED, RELEASED, SIGTERM_DEATHS, STILL_RUNNING, UNKNOWN

Entry = Mapping[str, object]
TIMED_OUT = Outcome.TIMED_OUT.value


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _sent(value: object) -> str:
    """When a signal went, after the drain's start; none on file: an earlier run sent it, untimed."""
    return BEFORE_RESTART if _num(value) is None else f"+{_secs(value)}"


def _after(value: object) -> str:
    """When a process ended, after the drain's start; none on file: an earlier run saw it end, untimed."""
    return BEFORE_RESTART if _num(value) is None else f"after {_secs(value)}"


def _secs(value: object) -> str:
    number = _num(value)
    if number is None:
        return "?"
    if number < 10:
        return f"{number:.2f} s"
    return f"{number:.1f} s" if number < 120 else f"{number / 60:.1f} min"


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def processes_of(entry: Entry) -> list[Mapping[str, object]]:
    """The entry's processes (none when it has no list of them)."""
    processes = entry.get("processes")
    return [p for p in processes if isinstance(p, Mapping)] if isinstance(processes, list) else []


def _signals(proc: Mapping[str, object], dry_run: bool = False) -> list[str]:
    """The signals sent; in a rehearsal, those that would have been (`would_send`; `signals` in an entry
    written before that field existed)."""
    signals = proc.get("would_send") or proc.get("signals") if dry_run else proc.get("signals")
    return [str(s) for s in signals] if isinstance(signals, list) else []


def _asked(signals: Sequence[str]) -> str | None:
    """The signal that asked the process to save and exit (the ladder's first step: SIGTERM), if one did."""
    return next((s for s in signals if s != KILL_NAME), None)


def tags(entry: Entry) -> list[str]:
    """What sets the drain apart: a rehearsal, or reopened for a late arrival after it had ended."""
    return [
        t
        for t, on in (("dry run", entry.get("dry_run")), ("reopened for a late arrival", entry.get("late")))
        if on
    ]


def one_line(entry: Entry) -> str:
    """`timed_out, started 2027-01-15T08:00:00.250Z, after 5.0 min: 2 processes: ...` (`status`)."""
    shown = tags(entry)
    tag = f" ({', '.join(shown)})" if shown else ""
    took = f", after {_secs(entry.get('duration'))}" if entry.get("ended") else ""
    return f"{entry.get('outcome')}{tag}, started {entry.get('started')}{took}: {totals(entry)}"


def event_started_line(event: Event) -> str:
    """`event started: preempted = TRUE (id preempted:TRUE@...); deadline 2026-12-01T16:36:03.006Z`."""
    deadline = f"; deadline {utc_time(event.deadline)}" if event.deadline is not None else ""
    return f"event started: {event.source} = {event.value} (id {event.event_id}){deadline}"


def event_cleared_line(event: Event) -> str:
    """`event cleared: preempted is back to normal (id preempted:TRUE@...)`."""
    return f"event cleared: {event.source} is back to normal (id {event.event_id})"


def started_line(found: HoldersFound) -> str:
    """A drain's start in one sentence, for the journal and a webhook, once its holders are known:
    `draining 3 TPU holder(s) for preempted: SIGTERM now, deadline ...Z (in 30 s), then SIGKILL what still
    holds a device`. A resumed, retried or reopened drain names itself and who still gets the asking
    signal; a rehearsal says what it would send (the surface adds its own `[dry run]` tag)."""
    ask = found.ladder.ask.name
    send = f"would send {ask}" if found.dry_run else ask
    if found.cause in (RESUMED, RETRY) or found.late:  # the same drain: the unsignalled get one
        began = f" (started {utc_time(found.started_wall)})" if found.started_wall is not None else ""
        cause = "reopened" if found.cause not in (RESUMED, RETRY) else found.cause
        what = f"{cause} drain {found.drain_id}{began}: {found.holders} TPU holder(s) hold a device"
        if cause == "reopened":
            what = f"late arrival: {what}"
        fresh = found.fresh
        what += f", {send} now to the {fresh} not yet signalled" if fresh else ", all signalled before"
    elif not found.holders:  # the drain ends at once (no_holders): no deadline to speak of
        return f"draining for {found.cause}: no process holds a TPU device, nothing to send"
    else:
        what = f"draining {found.holders} TPU holder(s) for {found.cause}: {send} now"
    deadline = f"deadline {utc_time(found.deadline)} ({time_left(found.deadline, found.now)})"
    return f"{what}, {deadline}, then {found.ladder.then()}"


def ended_line(entry: Entry) -> str:
    """A drain's end in one sentence, for the journal and a webhook: `status`'s line, and who lost their
    progress at the deadline (`drain timed_out, started ..., after 5.0 min: 2 processes: 1 exited on
    SIGTERM, 1 killed at the deadline; killed at the deadline, progress since its last checkpoint lost:
    pid 4244 (python3)`)."""
    line = f"drain {one_line(entry)}"
    if entry.get("dry_run") or entry.get("outcome") != TIMED_OUT:
        return line  # a rehearsal cost nothing; before the deadline nobody is left or killed
    for end, how in (
        (KILLED, "killed at the deadline"),
        (STILL_RUNNING, "still holding a device at the deadline"),
    ):
        who = ", ".join(
            f"pid {p.get('pid', '?')} ({_who(p)})" for p in processes_of(entry) if p.get("end") == end
        )
        line += f"; {how}, progress since its last checkpoint lost: {who}" if who else ""
    return line


def _who(proc: Mapping[str, object]) -> str:
    """`python3`, or `python3, pod ml/trainer-0 container jax`: its name, and its workload where known."""
    name, words = str(proc.get("name") or "name unknown"), words_of(proc.get("workload"))
    return f"{name}, {words}" if words else name


def totals(entry: Entry) -> str:
    """`3 processes: 2 exited on SIGTERM, 1 killed at the deadline` (a rehearsal: what would be sent)."""
    procs = processes_of(entry)
    head = _plural(len(procs), "process", "processes")
    if not procs:
        return "no process held a TPU device"
    if entry.get("dry_run"):
        asked = [_asked(_signals(p, dry_run=True)) for p in procs]
        names = "/".join(sorted({a for a in asked if a})) or "nothing"
        kill = sum(KILL_NAME in _signals(p, dry_run=True) for p in procs)
        then = f", {KILL_NAME} to {kill} at the deadline" if kill else ""
        would = f"{names} to {sum(map(bool, asked))}{then}"
        return f"{head}: would send {would} (dry run: nothing was sent)"
    counts: dict[str, int] = {}
    for p in procs:
        end, signals = p.get("end"), _signals(p)
        if end == EXITED and p.get("detail") in SIGTERM_DEATHS:
            what = "died of SIGTERM's default action (no checkpoint)"
        elif end == EXITED:
            ask = _asked(signals)
            what = f"exited on {ask}" if ask else "exited before being signalled"
        elif end == KILLED:
            what = "killed at the deadline"
        elif end == RELEASED:
            what = "released the device and kept running"
        elif end == STILL_RUNNING:
            what = "still running"
        else:
            what = "ended unseen (the daemon was down)"
        counts[what] = counts.get(what, 0) + 1
    return f"{head}: " + ", ".join(f"{n} {what}" for what, n in counts.items())


def process_line(proc: Mapping[str, object], *, dry_run: bool = False, live: bool = False) -> str:
    """`    4242 python3          alice    SIGTERM +0.0 s           exited 0 after 1.3 s`."""
    sent = (proc.get("would_send_after") or proc.get("sent_after")) if dry_run else proc.get("sent_after")
    offsets = sent if isinstance(sent, Mapping) else {}
    verb = "would send " if dry_run else ""
    names = _signals(proc, dry_run)
    signals = ", ".join(f"{name} {_sent(offsets.get(name))}" for name in names) or "not signalled"
    not_sent = proc.get("not_sent")
    if isinstance(not_sent, Mapping) and not_sent:
        signals += "; not sent: " + ", ".join(f"{k} ({v})" for k, v in not_sent.items())
    end, after = proc.get("end"), proc.get("ended_after")
    if end == STILL_RUNNING:
        how = "running" if live else "still running"
        if dry_run and KILL_NAME in names:  # what a real drain would have done, as the journal says it
            forecast = rehearsal_forecast(disposition_of(proc.get("sigterm")), signal.SIGTERM.name in names)
            how += f" ({forecast})"
    elif end == EXITED:
        status = proc.get("exit_status")
        code = f" {status}" if isinstance(status, int) else ""
        no_handler = proc.get("detail") in SIGTERM_DEATHS
        killer = f" (killed by {proc['exit_signal']})" if proc.get("exit_signal") and not no_handler else ""
        how = f"{'gone: ' if live else ''}exited{code}{killer} {_after(after)}"
    elif end == KILLED:
        gone = f", gone after {_secs(after)}" if _num(after) is not None else ""
        how = f"killed{gone}: it never left on its own (progress since its last checkpoint lost)"
    elif end == RELEASED:
        how = f"released the device {_after(after)}, still running"
    elif end == UNKNOWN:
        how = "how it ended is not known"
    else:
        how = str(end or "?")
    detail = proc.get("detail")
    late = " (late arrival)" if proc.get("late_arrival") else ""
    user, name = proc.get("user") or "?", proc.get("name") or "?"
    line = f"{proc.get('pid', '?')!s:>8} {name!s:<16} {user!s:<8} {verb}{signals:<26} {how}"
    words = words_of(proc.get("workload"))
    return (
        line
        + late
        + (f": {detail}" if isinstance(detail, str) and detail else "")
        + (f" [{words}]" if words else "")
    )


def block(entry: Entry, *, state_drain_id: str | None = None) -> list[str]:
    """One drain: the headline, its times and totals, a line per process, its notes. `state_drain_id`: the
    drain the state file has in progress (an entry without an outcome is that one, or one cut short)."""
    outcome = entry.get("outcome")
    if outcome is None:
        running = state_drain_id is not None and entry.get("id") == state_drain_id
        outcome = "in progress" if running else "unfinished (cut short: a crash or a lost state file)"
    event = entry.get("event")
    what = ""
    if isinstance(event, Mapping) and event.get("key"):
        what = f"  {event.get('key')} = {event.get('value')}"
    shown = tags(entry)
    lines = [
        f"● drain {entry.get('id', '?')}: {outcome}{what}" + (f"  ({', '.join(shown)})" if shown else "")
    ]
    lines.append(f"     Started: {entry.get('started', '?')}")
    lines.append(f"    Deadline: {entry.get('deadline', '?')} (then {entry.get('on_timeout', '?')})")
    if entry.get("ended"):
        lines.append(f"       Ended: {entry.get('ended')}, after {_secs(entry.get('duration'))}")
    if entry.get("outcome") is None and not processes_of(entry):
        lines.append("   Processes: recorded when the drain ends (`tpu-watchdog status` shows them now)")
    else:
        lines.append(f"   Processes: {totals(entry)}")
    dry = bool(entry.get("dry_run"))
    lines += [f"  {process_line(p, dry_run=dry)}" for p in processes_of(entry)]
    notes = entry.get("notes")
    lines += (
        [f"        note: {n}" for n in notes]
        if isinstance(notes, Sequence) and not isinstance(notes, str)
        else []
    )
    return lines
