"""What the daemon tells the site's webhooks (their subscriber of the moments, `Notices.told`): a notice at
each moment of an event (event_started at detection; drain_started once the drain has its holders, in the
journal's words; drain_finished with the outcome and each process; event_cleared).

Every body has `type`, `time` (RFC 3339 UTC), `host`, `event` {key, value, id} and `text`, one line for
people, so a Slack or Google Chat incoming webhook shows it as it is; a generic receiver reads the rest.
Built on the loop thread and handed to the sender's queue: nothing here waits on the network.

A reload that changes the webhooks hands `use` a new sender (or None): the next notices go to the new URLs,
and what the old sender had queued still goes to the URLs it was queued for (a notice is meant for the
receivers configured when it happened), from the old sender's threads, for at most RETIRE_TIMEOUT s. So a
URL kept through the reload may, while its receiver was failing, get an old notice after a newer one: each
body's `time` orders them.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Mapping

from watchdog.core.clock import Clock, utc_time
from watchdog.core.identity import host_fields
from watchdog.core.lifecycle import Event, EventCleared, EventStarted, Lifecycle
from watchdog.core.moments import RETRY, DrainEnded, HoldersFound, Moment
from watchdog.core.vocabulary import Output, WatchedKey
from watchdog.store.drain_text import (
    ended_line,
    event_cleared_line,
    event_started_line,
    processes_of,
    started_line,
)
from watchdog.surface.webhooks import WebhookSender

RETIRE_TIMEOUT = 30.0  # s a sender replaced by a reload has to deliver its queue (4 tries: 7 s of backoff)
RETIRED = "a reload replaced the webhooks before it was sent"


class Notices:
    """Builds each notice and submits it; with no webhook configured, builds nothing."""

    def __init__(
        self,
        sender: WebhookSender | None,
        host: Callable[[], Mapping[str, str]],
        clock: Clock,
        dry_run: bool,
    ) -> None:
        self.sender, self.host, self.clock, self.dry_run = sender, host, clock, dry_run
        self._announced: tuple[str, bool] | None = None  # the drain (id, reopened) a drain_started told
        self._retiring: list[tuple[WebhookSender, threading.Thread]] = []  # replaced, still delivering

    def use(self, sender: WebhookSender | None) -> None:
        """The next notices go through `sender`; the old one delivers its queue on a thread of its own."""
        old, self.sender = self.sender, sender
        self._retiring = [(s, t) for s, t in self._retiring if t.is_alive()]
        if old is not None:
            thread = threading.Thread(
                target=old.close, args=(RETIRE_TIMEOUT, RETIRED), name="webhook-retiring", daemon=True
            )
            thread.start()
            self._retiring.append((old, thread))

    def close(self, timeout: float) -> None:
        """At shutdown: the sender in use, and any replaced one still delivering, get `timeout` s each."""
        for sender in [self.sender, *(old for old, _ in self._retiring)]:
            if sender is not None:
                sender.close(timeout)

    def webhooks(self) -> list[dict[str, object]]:
        """/status `webhooks`: the sender in use, each URL redacted."""
        return [] if self.sender is None else self.sender.status()

    output = Output.WEBHOOKS

    def told(self, moment: Moment, lifecycle: Lifecycle) -> None:
        """The webhook subscriber (`daemon/telling.py`): an event's start and end, a drain's start once its
        holders are known (once: a retried attempt of a drain already told is the same drain; one whose
        first attempt failed before it had its holders is told at its retry) and its end."""
        if isinstance(moment, EventStarted):
            self.event_started(moment.event)
        elif isinstance(moment, EventCleared):
            self.event_cleared(moment.event)
        elif isinstance(moment, HoldersFound):
            drain = (moment.drain_id, moment.late)
            if moment.cause != RETRY or self._announced != drain:
                self._announced = drain
                self.drain_started(lifecycle.drain_event(), moment)
        elif isinstance(moment, DrainEnded):
            self.drain_finished(moment.event, moment.entry, moment.drain_id)

    def event_started(self, event: Event) -> None:
        self._send("event_started", event, event_started_line(event), deadline=_time(event.deadline))

    def drain_started(self, event: Event | None, found: HoldersFound) -> None:
        """The journal's sentence of the drain's start (`started_line`), with its holders counted."""
        self._send(
            "drain_started", event, started_line(found), deadline=_time(found.deadline),
            drain_id=found.drain_id, late=found.late, holders=found.holders,
        )  # fmt: skip

    def drain_finished(self, event: Event | None, entry: Mapping[str, object], drain_id: str) -> None:
        """The drain's end as its history entry has it (`DrainEnded.entry`): the journal's sentence, and
        the entry's own outcome, times and processes."""
        self._send(
            "drain_finished", event, ended_line(entry), drain_id=drain_id, late=bool(entry.get("late")),
            outcome=entry.get("outcome"), started=entry.get("started"), ended=entry.get("ended"),
            duration=entry.get("duration"), processes=processes_told(entry),
        )  # fmt: skip

    def event_cleared(self, event: Event) -> None:
        self._send("event_cleared", event, event_cleared_line(event))

    def _send(self, kind: str, event: Event | None, text: str, **more: object) -> None:
        if self.sender is None:
            return
        host = self.host()
        body: dict[str, object] = {
            "type": kind,
            "time": utc_time(self.clock.wall()),
            "host": host_fields(host),
            "event": None
            if event is None
            else {"key": WatchedKey(event.source).path, "value": event.value, "id": event.event_id},
            "text": f"tpu-watchdog on {_host_words(host)}: {'[dry run] ' if self.dry_run else ''}{text}",
            "dry_run": self.dry_run,
            **more,
        }
        self.sender.submit(body)


# What a receiver gets of each process: the history entry's own fields (store/drain_entry.py renders both),
# without the times and devices a page does not need.
TOLD_FIELDS = ("pid", "start_time", "name", "signals", "would_send", "end", "exit_status", "exit_signal",
               "late_arrival", "detail", "workload")  # fmt: skip


def processes_told(entry: Mapping[str, object]) -> list[dict[str, object]]:
    """Each process of a drain for a receiver: who, which signals went out (a rehearsal's apart, in
    `would_send`), how it ended and why (`detail`: no SIGTERM handler...), its unit, container or pod (who to
    page): the history entry's own fields, words and types."""
    return [{field: p.get(field) for field in TOLD_FIELDS} for p in processes_of(entry)]


def _host_words(host: Mapping[str, str]) -> str:
    """`t1v-n-fake-w-0 (v4-8, us-central2-b, worker 0)`, with what is known."""
    name = host.get("instance_name") or host.get("instance_id") or socket.gethostname()
    facts = [host.get("accelerator_type", ""), host.get("zone", "")]
    if host.get("worker_id"):
        facts.append(f"worker {host['worker_id']}")
    shown = ", ".join(f for f in facts if f)
    return f"{name} ({shown})" if shown else name


def _time(epoch: float | None) -> str | None:
    return None if epoch is None else utc_time(epoch)
