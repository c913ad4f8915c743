"""What the journal says of each moment (`core/moments.py`): the log subscriber of `daemon/telling.py`.

Log lines follow one rule: one line per fact, the thing named once, times in UTC with a Z. A timed-out
drain is an ERROR naming each process that had to be killed (its progress since the last checkpoint is
lost); during a drain a progress line comes every `PROGRESS_INTERVAL` s, so a long grace is never silent.
A drain's start is said by its first line (`HoldersFound`, said by the drain as it has them), with the holders
it signals.
"""

from __future__ import annotations

import logging

from watchdog.core.clock import time_left, utc_time
from watchdog.core.drain_record import SignalResult
from watchdog.core.ladder import Ladder, signal_name
from watchdog.core.lifecycle import CancelDrain, EventCleared, EventStarted, Lifecycle, MoveDeadline
from watchdog.core.moments import (
    RESUMED,
    DaemonStarted,
    DrainEnded,
    DrainProgress,
    DrainStarted,
    HoldersFound,
    Moment,
    ProcessSignalled,
)
from watchdog.core.vocabulary import DaemonState, Outcome, Output
from watchdog.core.workload import Workload
from watchdog.store.drain_text import (
    ended_line,
    event_cleared_line,
    event_started_line,
    process_line,
    processes_of,
    started_line,
)
from watchdog.surface.logs import fields, workload_fields

log = logging.getLogger("tpu-watchdog")

PROGRESS_INTERVAL = 30.0  # s between a drain's progress lines (a 300 s grace gets nine)
PROGRESS_NAMES = 5  # processes named in a progress line; the rest are counted


class LogLines:
    """The log subscriber. `ladder`: the policy's, for what a drain's deadline does (it needs a restart to
    change, as does `dry_run`)."""

    output = Output.LOG

    def __init__(self, ladder: Ladder, dry_run: bool) -> None:
        self.ladder, self.dry_run = ladder, dry_run

    def told(self, moment: Moment, lifecycle: Lifecycle) -> None:
        if isinstance(moment, DaemonStarted):
            log.info(
                "tpu-watchdog started: state %s, devices %s%s", moment.state, " ".join(moment.patterns),
                " (dry run: no signal will be sent)" if self.dry_run else "",
                extra=fields("daemon_started", state=moment.state),
            )  # fmt: skip
        elif isinstance(moment, DrainStarted) and moment.cause == RESUMED and lifecycle.drain is not None:
            drain = lifecycle.drain
            log.warning(
                "resuming the drain started at %s: deadline unchanged, %s (%s)", utc_time(drain.started),
                utc_time(drain.deadline), time_left(drain.deadline, moment.now),
                extra=fields("state_recovered", state=DaemonState.DRAINING.value),
            )  # fmt: skip
        elif isinstance(moment, EventStarted):
            event = moment.event
            log.warning(
                "%s", event_started_line(event),
                extra=fields("event_started", event=event.source, value=event.value, event_id=event.event_id),
            )  # fmt: skip
        elif isinstance(moment, MoveDeadline):
            moved = utc_time(moment.deadline)
            log.warning("%s moves the drain deadline earlier, to %s", moment.because.source, moved)
        elif isinstance(moment, CancelDrain):
            log.warning("cancelling the drain: %s (no signal goes out from now on)", moment.reason)
        elif isinstance(moment, EventCleared):
            event = moment.event
            log.info(
                "%s", event_cleared_line(event),
                extra=fields("event_cleared", event=event.source, event_id=event.event_id),
            )  # fmt: skip
        elif isinstance(moment, HoldersFound):
            self._found(moment)
        elif isinstance(moment, ProcessSignalled):
            self._signalled(moment)
        elif isinstance(moment, DrainProgress):
            self._progress(moment)
        elif isinstance(moment, DrainEnded):
            self._ended(moment)

    def _found(self, moment: HoldersFound) -> None:
        """The drain's first line, the webhook's `drain_started` sentence (`store/drain_text.py`)."""
        log.warning(
            "%s%s", "[dry run] " if moment.dry_run else "", started_line(moment),
            extra=fields("drain_started", event=moment.cause, state=DaemonState.DRAINING.value,
                         drain_id=moment.drain_id, late=moment.late),
        )  # fmt: skip

    def _signalled(self, moment: ProcessSignalled) -> None:
        """`SIGTERM to pid 7 (python3, start time 123, unit train.service): sent`; a dry run says what it
        would have sent."""
        identity, name, said, dry = moment.identity, signal_name(moment.signum), moment.result.value, ""
        process = moment.process or "name unknown"
        journal = fields(
            "signal_sent", pid=identity.pid, start_time=identity.start_time, process=process, signal=name,
            result=moment.result.value, drain_id=moment.drain_id, event_ids=list(moment.event_ids),
            late=moment.late, **workload_fields(moment.workload),
        )  # fmt: skip
        if moment.dry_run:  # nothing left the daemon: say what would have gone, to a process there
            dry, name = "[dry run] ", f"would send {name}"
            said = "not sent" if moment.result is SignalResult.SENT else said
        words = moment.workload.describe() if moment.workload else ""
        log.warning(
            "%s%s to pid %d (%s, start time %d%s%s): %s",
            dry, name, identity.pid, process, identity.start_time, f", {words}" if words else "",
            ", late arrival" if moment.late else "", said, extra=journal,
        )  # fmt: skip

    def _ended(self, moment: DrainEnded) -> None:
        """The drain's end as its history entry has it (`DrainEnded.entry`), in `status`'s and `history`'s
        own words: a line for the drain (an ERROR when a process lost its progress at the deadline), then
        a line per process."""
        record, entry = moment.record, moment.entry
        outcome = record.outcome or Outcome.INTERRUPTED
        lost = outcome is Outcome.TIMED_OUT and not record.dry_run
        log.log(
            logging.ERROR if lost else logging.WARNING, "%s", ended_line(entry),
            extra=fields("drain_finished", outcome=outcome.value, state=moment.state,
                         drain_id=moment.drain_id, late=record.late),
        )  # fmt: skip
        for proc in processes_of(entry):
            log.info(
                "  %s", process_line(proc, dry_run=record.dry_run),
                extra=fields(pid=proc.get("pid"), start_time=proc.get("start_time"), process=proc.get("name"),
                             drain_id=moment.drain_id,
                             **workload_fields(Workload.from_dict(proc.get("workload")))),
            )  # fmt: skip

    def _progress(self, moment: DrainProgress) -> None:
        """`drain ...: 2 of 3 still running (pid 7 python3, pid 8 train); deadline in 270 s (...Z)`."""
        record, deadline = moment.record, moment.deadline
        procs = [] if record is None else [p for p in record.processes.values() if p.pending]
        names = ", ".join(f"pid {p.identity.pid} {p.name}" for p in procs[:PROGRESS_NAMES])
        more = f" and {len(procs) - PROGRESS_NAMES} more" if len(procs) > PROGRESS_NAMES else ""
        total = len(record.processes) if record is not None else 0
        then = f"then {self.ladder.force.name}" if self.ladder.force else "then leave them"
        log.info(
            "drain %s: %d of %d still running%s; deadline %s (%s), %s",
            moment.drain_id, len(procs), total, f" ({names}{more})" if procs else "",
            time_left(deadline, moment.now), utc_time(deadline), then,
            extra=fields("drain_progress", drain_id=moment.drain_id, running=len(procs),
                         deadline=utc_time(deadline)),
        )  # fmt: skip
