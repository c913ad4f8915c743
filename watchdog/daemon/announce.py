"""Each moment of an event, said everywhere it is said: the log line (with its journal fields), the
webhook notice and the site hook. Called on the loop thread; nothing here waits (hooks and webhooks run
on threads of their own).

Log lines follow one rule: one line per fact, the thing named once, times in UTC with a Z. A timed-out
drain is an ERROR naming each process that had to be killed (its progress since the last checkpoint is
lost); during a drain a progress line comes every `PROGRESS_INTERVAL` s, so a long grace is never silent.
"""

from __future__ import annotations

import logging

from watchdog.config.settings import Config
from watchdog.core.clock import time_left, utc_time
from watchdog.core.drain_record import DrainRecord
from watchdog.core.lifecycle import Event, Lifecycle
from watchdog.core.vocabulary import Outcome
from watchdog.daemon.notices import Notices, who_was_killed
from watchdog.surface.hooks import HookContext, HookRunner
from watchdog.surface.logs import fields

log = logging.getLogger("tpu-watchdog")

PROGRESS_INTERVAL = 30.0  # s between a drain's progress lines (a 300 s grace gets nine)
PROGRESS_NAMES = 5  # processes named in a progress line; the rest are counted


class Announcer:
    def __init__(self, config: Config, hooks: HookRunner, notices: Notices) -> None:
        self.config, self.hooks, self.notices = config, hooks, notices

    def event_started(self, event: Event, deadline: float | None) -> None:
        at = f"; deadline {utc_time(event.deadline)}" if event.deadline is not None else ""
        log.warning(
            "event started: %s = %s (id %s)%s", event.source, event.value, event.event_id, at,
            extra=fields("event_started", event=event.source, value=event.value, event_id=event.event_id),
        )  # fmt: skip
        self.notices.event_started(event)  # at detection: before its drain starts
        self._hook("on_event_start", event, deadline)

    def event_cleared(self, event: Event, deadline: float | None) -> None:
        log.info(
            "event cleared: %s is back to normal (id %s)", event.source, event.event_id,
            extra=fields("event_cleared", event=event.source, event_id=event.event_id),
        )  # fmt: skip
        self.notices.event_cleared(event)
        self._hook("on_event_clear", event, deadline)

    def drain_started(self, lifecycle: Lifecycle, deadline: float, cause: str) -> None:
        """The notice of the lifecycle's drain starting (its log line is the drain thread's); a retried
        attempt is the same drain, already told."""
        active = lifecycle.drain
        if cause != "retry" and active is not None:
            self.notices.drain_started(lifecycle.drain_event(), deadline, active.drain_id,
                                       resumed=cause == "resumed", late=active.late)  # fmt: skip

    def drain_finished(
        self, record: DrainRecord, event: Event | None, drain_id: str, state: str, deadline: float | None
    ) -> None:
        outcome = record.outcome or Outcome.INTERRUPTED
        killed = who_was_killed(record)
        lost = outcome is Outcome.TIMED_OUT and not record.dry_run
        how = "killed at the deadline" if self.config.on_timeout == "kill" else "left holding a device"
        loss = f"; {how}, progress since its last checkpoint lost: {killed}" if lost else ""
        log.log(
            logging.ERROR if lost else logging.WARNING, "%s%s", record.one_line(), loss,
            extra=fields("drain_finished", outcome=outcome.value, state=state, drain_id=drain_id,
                         late=record.late),
        )  # fmt: skip
        for proc in record.processes.values():
            log.info(
                "  %s", proc.describe(record.started, record.dry_run),
                extra=fields(pid=proc.identity.pid, process=proc.name, drain_id=drain_id),
            )  # fmt: skip
        self.notices.drain_finished(event, record, drain_id)
        self._hook("on_drain_end", event, deadline, outcome.value)

    def progress(self, record: DrainRecord | None, deadline: float, drain_id: str, now: float) -> None:
        """`drain ...: 2 of 3 still running (pid 7 python3, pid 8 train); deadline in 270 s (...Z)`."""
        procs = [] if record is None else [p for p in record.processes.values() if p.pending]
        names = ", ".join(f"pid {p.identity.pid} {p.name}" for p in procs[:PROGRESS_NAMES])
        more = f" and {len(procs) - PROGRESS_NAMES} more" if len(procs) > PROGRESS_NAMES else ""
        total = len(record.processes) if record is not None else 0
        then = "then SIGKILL" if self.config.on_timeout == "kill" else "then leave them"
        log.info(
            "drain %s: %d of %d still running%s; deadline %s (%s), %s",
            drain_id, len(procs), total, f" ({names}{more})" if procs else "", time_left(deadline, now),
            utc_time(deadline), then,
            extra=fields("drain_progress", drain_id=drain_id, running=len(procs),
                         deadline=utc_time(deadline)),
        )  # fmt: skip

    def _hook(self, name: str, event: Event | None, deadline: float | None, outcome: str = "") -> None:
        source, value, event_id = (event.source, event.value, event.event_id) if event else ("", "", "")
        context = HookContext(source, value, event_id, outcome, deadline, self.config.dry_run)
        self.hooks.run_hook(name, context)
