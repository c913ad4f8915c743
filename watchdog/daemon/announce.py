"""Each moment of an event, said everywhere it is said: the log line (with its journal fields), the
webhook notice and the site hook. Called on the loop thread after the drain is handed over and its state
written; nothing here waits (hooks and webhooks run on threads of their own), and each of the three is
guarded on its own (`Outputs`): a log line that fails neither stops its webhook nor raises to the loop.

Log lines follow one rule: one line per fact, the thing named once, times in UTC with a Z. A timed-out
drain is an ERROR naming each process that had to be killed (its progress since the last checkpoint is
lost); during a drain a progress line comes every `PROGRESS_INTERVAL` s, so a long grace is never silent.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from watchdog.config.settings import Config
from watchdog.core.clock import time_left, utc_time
from watchdog.core.drain_record import DrainRecord
from watchdog.core.ladder import Ladder
from watchdog.core.lifecycle import (
    Action,
    ActiveDrain,
    CancelDrain,
    Event,
    EventCleared,
    EventStarted,
    Lifecycle,
    MoveDeadline,
    StartDrain,
)
from watchdog.core.vocabulary import DaemonState, Outcome, Output
from watchdog.daemon.notices import Notices, who_was_killed
from watchdog.daemon.outputs import Outputs
from watchdog.surface.hooks import HookContext, HookRunner
from watchdog.surface.logs import fields, workload_fields
from watchdog.surface.metrics import Metrics

log = logging.getLogger("tpu-watchdog")

PROGRESS_INTERVAL = 30.0  # s between a drain's progress lines (a 300 s grace gets nine)
PROGRESS_NAMES = 5  # processes named in a progress line; the rest are counted


class Announcer:
    def __init__(
        self, config: Config, hooks: HookRunner, notices: Notices, metrics: Metrics, outputs: Outputs,
        ladder: Ladder,
    ) -> None:  # fmt: skip
        """`ladder`: the policy's, for what a drain's deadline does (it needs a restart to change)."""
        self.config, self.hooks, self.notices, self.metrics = config, hooks, notices, metrics
        self.outputs, self.ladder = outputs, ladder

    def daemon_started(self, state: str, patterns: Sequence[str]) -> None:
        with self.outputs.guarded(Output.LOG):
            log.info(
                "tpu-watchdog started: state %s, devices %s%s", state, " ".join(patterns),
                " (dry run: no signal will be sent)" if self.config.dry_run else "",
                extra=fields("daemon_started", state=state),
            )  # fmt: skip

    def resumed(self, drain: ActiveDrain, now: float) -> None:
        with self.outputs.guarded(Output.LOG):
            log.warning(
                "resuming the drain started at %s: deadline unchanged, %s (%s)", utc_time(drain.started),
                utc_time(drain.deadline), time_left(drain.deadline, now),
                extra=fields("state_recovered", state=DaemonState.DRAINING.value),
            )  # fmt: skip

    def action(self, action: Action, lifecycle: Lifecycle) -> None:
        """What one action of the lifecycle says, once it is carried out and on file."""
        deadline = lifecycle.drain.deadline if lifecycle.drain else None
        if isinstance(action, EventStarted):
            self.event_started(action.event, deadline)
        elif isinstance(action, StartDrain):
            self.drain_started(lifecycle, action.deadline, action.event.source)
        elif isinstance(action, MoveDeadline):
            with self.outputs.guarded(Output.METRICS):
                self.metrics.set_deadline(action.deadline)
            with self.outputs.guarded(Output.LOG):
                moved = utc_time(action.deadline)
                log.warning("%s moves the drain deadline earlier, to %s", action.because.source, moved)
        elif isinstance(action, CancelDrain):
            with self.outputs.guarded(Output.LOG):
                log.warning("cancelling the drain: %s (no signal goes out from now on)", action.reason)
        elif isinstance(action, EventCleared):
            self.event_cleared(action.event, deadline)

    def event_started(self, event: Event, deadline: float | None) -> None:
        with self.outputs.guarded(Output.LOG):
            at = f"; deadline {utc_time(event.deadline)}" if event.deadline is not None else ""
            log.warning(
                "event started: %s = %s (id %s)%s", event.source, event.value, event.event_id, at,
                extra=fields("event_started", event=event.source, value=event.value, event_id=event.event_id),
            )  # fmt: skip
        with self.outputs.guarded(Output.WEBHOOKS):
            self.notices.event_started(event)  # queued before the drain_started notice
        self._hook("on_event_start", event, deadline)

    def event_cleared(self, event: Event, deadline: float | None) -> None:
        with self.outputs.guarded(Output.LOG):
            log.info(
                "event cleared: %s is back to normal (id %s)", event.source, event.event_id,
                extra=fields("event_cleared", event=event.source, event_id=event.event_id),
            )  # fmt: skip
        with self.outputs.guarded(Output.WEBHOOKS):
            self.notices.event_cleared(event)
        self._hook("on_event_clear", event, deadline)

    def drain_started(self, lifecycle: Lifecycle, deadline: float, cause: str) -> None:
        """The deadline metric and the notice of the lifecycle's drain starting (its log line is the drain
        thread's); a retried attempt is the same drain, already told."""
        with self.outputs.guarded(Output.METRICS):
            self.metrics.set_deadline(deadline)
        active = lifecycle.drain
        if cause != "retry" and active is not None:
            with self.outputs.guarded(Output.WEBHOOKS):
                self.notices.drain_started(lifecycle.drain_event(), deadline, active.drain_id,
                                           resumed=cause == "resumed", late=active.late)  # fmt: skip

    def drain_finished(
        self, record: DrainRecord, event: Event | None, drain_id: str, state: str, deadline: float | None
    ) -> None:
        outcome = record.outcome or Outcome.INTERRUPTED
        with self.outputs.guarded(Output.LOG):
            killed = who_was_killed(record)
            lost = outcome is Outcome.TIMED_OUT and not record.dry_run
            how = "killed at the deadline" if record.on_timeout == "kill" else "left holding a device"
            loss = f"; {how}, progress since its last checkpoint lost: {killed}" if lost else ""
            log.log(
                logging.ERROR if lost else logging.WARNING, "%s%s", record.one_line(), loss,
                extra=fields("drain_finished", outcome=outcome.value, state=state, drain_id=drain_id,
                             late=record.late),
            )  # fmt: skip
            for proc in record.processes.values():
                log.info(
                    "  %s", proc.describe(record.started, record.dry_run),
                    extra=fields(pid=proc.identity.pid, process=proc.name, drain_id=drain_id,
                                 **workload_fields(proc.workload)),
                )  # fmt: skip
        with self.outputs.guarded(Output.WEBHOOKS):
            self.notices.drain_finished(event, record, drain_id)
        self._hook("on_drain_end", event, deadline, outcome.value)

    def progress(self, record: DrainRecord | None, deadline: float, drain_id: str, now: float) -> None:
        """`drain ...: 2 of 3 still running (pid 7 python3, pid 8 train); deadline in 270 s (...Z)`."""
        with self.outputs.guarded(Output.LOG):
            self._progress(record, deadline, drain_id, now)

    def _progress(self, record: DrainRecord | None, deadline: float, drain_id: str, now: float) -> None:
        procs = [] if record is None else [p for p in record.processes.values() if p.pending]
        names = ", ".join(f"pid {p.identity.pid} {p.name}" for p in procs[:PROGRESS_NAMES])
        more = f" and {len(procs) - PROGRESS_NAMES} more" if len(procs) > PROGRESS_NAMES else ""
        total = len(record.processes) if record is not None else 0
        then = f"then {self.ladder.force.name}" if self.ladder.force else "then leave them"
        log.info(
            "drain %s: %d of %d still running%s; deadline %s (%s), %s",
            drain_id, len(procs), total, f" ({names}{more})" if procs else "", time_left(deadline, now),
            utc_time(deadline), then,
            extra=fields("drain_progress", drain_id=drain_id, running=len(procs),
                         deadline=utc_time(deadline)),
        )  # fmt: skip

    def _hook(self, name: str, event: Event | None, deadline: float | None, outcome: str = "") -> None:
        source, value, event_id = (event.source, event.value, event.event_id) if event else ("", "", "")
        with self.outputs.guarded(Output.HOOKS):
            context = HookContext(source, value, event_id, outcome, deadline, self.config.dry_run)
            self.hooks.run_hook(name, context)
