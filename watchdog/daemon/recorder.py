"""The daemon's account of its drains: the history (`store/history.py`) and the drain counters.

A subscriber (`daemon/telling.py`): a drain enters the history when it is told started (after the loop has
queued the state file's write, so it never delays a signal) and again when it is told ended, each time
with the host's identity as far as it is known then (`host`). A drain the daemon cannot finish is written
from what the state file kept (`restored`, at start): one being cancelled when the daemon stopped
(`Lifecycle.restored` ends it) and one of a previous boot (the host went down mid-drain). A rehearsal (dry
run) is recorded like any drain, with `dry_run: true`, and counted apart
(`tpu_watchdog_dry_run_drains_total`): it is never a real outcome in `tpu_watchdog_drains_total`, so no
alert pages on it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TypeVar

from watchdog.config.settings import Config
from watchdog.core.clock import Clock
from watchdog.core.drain_record import DrainRecord
from watchdog.core.identity import host_fields, host_labels
from watchdog.core.lifecycle import ActiveDrain, Event, Lifecycle
from watchdog.core.moments import DrainEnded, Moment
from watchdog.core.process import ProcessIdentity
from watchdog.core.vocabulary import Outcome, Output, WatchedKey
from watchdog.daemon.outputs import Outputs
from watchdog.host.procfs import start_time
from watchdog.store.drain_entry import (
    Alive,
    Host,
    entry_from_record,
    entry_from_saved,
    open_entry,
    rejoined,
)
from watchdog.store.history import HistoryFile
from watchdog.store.records import SavedState
from watchdog.store.statefile import StateStore
from watchdog.surface.metrics import Metrics

log = logging.getLogger("tpu-watchdog")

T = TypeVar("T")

RETRY_EVERY = 30.0  # s between attempts to write history a full disk held back


def alive(identity: ProcessIdentity) -> bool:
    """The process still runs (same PID, same start time)."""
    return start_time(identity.pid) == identity.start_time


class HistoryEntries:
    """The history's subscriber: each drain's entry (at its start and at its end) and its counters."""

    output = Output.HISTORY  # what its failures are counted as

    def __init__(
        self, store: StateStore, config: Config, metrics: Metrics, clock: Clock, outputs: Outputs,
        host: Callable[[], Mapping[str, str]] = dict,
    ) -> None:  # fmt: skip
        """The history of `store`'s directory. `host`: the identity's labels as known now (`StatusView`);
        each entry names its host by them (the fields of a webhook's `host`, the known ones)."""
        self.store, self.config, self.metrics, self.clock, self.host = store, config, metrics, clock, host
        self.outputs = outputs
        # Written in a thread of its own, on the state file's disk: a hung disk never stops the loop.
        self.history = HistoryFile(
            store.dir, clock=clock, background=True, fsync=store.fsync, changed=self._persisted
        )
        self._recorded: str | None = None  # the drain whose start is in the history (checked once)
        # The running drain as opened (its id, events, start, deadline) and the host its opening entry
        # names, for `live` (any thread: each replaced whole).
        self.current: tuple[DrainRecord, Host] | None = None
        self.last_drain: dict[str, object] | None = None  # the entry of the last drain ended in this run
        self._next_retry = 0.0
        metrics.dry_run.set(1 if config.dry_run else 0)

    def told(self, moment: Moment, lifecycle: Lifecycle) -> None:
        """A drain that ended is written down and counted; the running drain's facts follow every moment
        (its deadline moved, an event joined it), and a new one gets its opening entry."""
        if isinstance(moment, DrainEnded) and moment.drain is not None:
            outcome = moment.record.outcome or Outcome.INTERRUPTED
            self.last_drain = self.finished(moment.entry, moment.record, outcome, moment.drain)
        self.seen(lifecycle)

    def entry_of(
        self, record: DrainRecord, drain: ActiveDrain | None, lifecycle: Lifecycle
    ) -> dict[str, object]:
        """An ended drain's entry, as the history keeps it: built once, by the loop, for its `DrainEnded`
        moment, so the history, /status, the journal and the webhooks render the one same entry. `drain`:
        the lifecycle's drain as it was when it ended (None: it had none; the entry is never written)."""
        with self.outputs.guarded(Output.HISTORY):
            if drain is None:
                return entry_from_record(record, host_fields(self.host(), known_only=True))
            opened = self._opened(drain, lifecycle.events.values())
            return self._entry(_serving(record, opened), self._host(drain.drain_id))
        return entry_from_record(record, {})  # a bug in the above: the record alone, told all the same

    def host_labels(self) -> Mapping[str, str]:
        """Who this host is, for a notice: as learned, or (not answered yet since a restart) as the running
        drain's opening entry named it, so a resumed drain's notices name the host as its first ones did."""
        labels = self.host()
        current = self.current
        if not host_fields(labels, known_only=True) and current is not None and current[1]:
            return host_labels(current[1])
        return labels

    def restored(self, saved: SavedState, lifecycle: Lifecycle) -> None:
        """At start: the drain on file that will not be resumed, and one from before a reboot."""
        self._guarded(self._restored, saved, lifecycle)

    def _restored(self, saved: SavedState, lifecycle: Lifecycle) -> None:
        if saved.drain is not None and lifecycle.drain is None:
            why = "its events had cleared when the daemon stopped; ended on restart"
            self._from_file(saved.drain, saved, Outcome.CANCELLED.value, why, alive)
        ended = saved.ended_drain
        opened = None if ended is None else self.history.find(ended.drain_id)
        if ended is not None and opened is not None and opened.get("outcome") is None:
            # The state file has the drain's end; the history's write of it was lost (the daemon was
            # killed in between): its end is written now, from the state file.
            why = "the daemon stopped before it wrote the drain's end here: as the state file kept it"
            outcome = saved.last_outcome or Outcome.INTERRUPTED.value
            self._from_file(ended, saved, outcome, why, alive, ended_at=saved.ended_at)
        previous = self.store.previous_boot
        if previous is not None and previous.drain is not None:
            why = "the host restarted before the drain ended: how each process ended is not known"
            self._from_file(previous.drain, previous, Outcome.INTERRUPTED.value, why, None)
        self._persisted()

    def seen(self, lifecycle: Lifecycle) -> None:
        """A drain not yet in the history gets its opening entry, once the state file knows it (the loop
        calls this again after each state write): a kill -9 between the two would otherwise leave in the
        history a drain that no restart resumes, beside the one the restart starts for the same event."""
        self._guarded(self._seen, lifecycle)

    def _seen(self, lifecycle: Lifecycle) -> None:
        drain = lifecycle.drain
        if drain is None:
            self.current = None
            return
        opened, host = self._opened(drain, lifecycle.events.values()), self._host(drain.drain_id)
        self.current = opened, host
        on_file = self.store.state.drain
        if drain.drain_id == self._recorded or on_file is None or on_file.drain_id != drain.drain_id:
            return
        self._recorded = drain.drain_id  # one id, not every drain's: a daemon runs for years
        if self.history.find(drain.drain_id) is None:  # a resumed drain has its entry already
            self.history.append(open_entry(opened, host))
            self._persisted()

    def live(self, record: DrainRecord) -> dict[str, object] | None:
        """The running drain as the history will show it (HTTP threads: reads only whole values)."""
        current = self.current
        if current is None:
            return None
        with self.outputs.guarded(Output.STATUS):  # /status shows the drain without its processes, then
            return self._entry(_serving(record, current[0]), current[1])
        return None

    def finished(
        self, entry: Mapping[str, object], record: DrainRecord, outcome: Outcome, drain: ActiveDrain
    ) -> dict[str, object] | None:
        """A drain ended (not interrupted): write its `entry` down (`entry_of`; a reopened drain's entry
        is rewritten, by its id), then count it where it belongs (whoever sees the counter move finds the
        drain in the history). A drain is counted once, when it first ends: a reopened one (a late arrival
        joined it) is not counted again, whatever its second end. Returns the entry written (what `/status`
        shows as `last_drain`), or None when none could be. `drain`: as it was when it ended."""
        counted = drain.late and self._ended_before(drain.drain_id)
        written = self._guarded(self._write_finished, entry)
        if counted:
            return written
        with self.outputs.guarded(Output.METRICS):
            if record.dry_run:
                self.metrics.dry_run_drains.labels(outcome.value).inc()
            else:
                self.metrics.drains.labels(outcome.value).inc()
                if record.ended is not None:
                    self.metrics.drain_duration.observe(max(0.0, record.ended - record.started))
        return written

    def _ended_before(self, drain_id: str) -> bool:
        """Whether the history has the drain as ended (and so counted): it is being reopened."""
        entry = self.history.find(drain_id)
        return entry is not None and entry.get("outcome") is not None

    def _write_finished(self, entry: Mapping[str, object]) -> dict[str, object]:
        written = dict(entry)
        self.history.append(written)
        self._persisted()
        return written

    def _entry(self, record: DrainRecord, host: Host) -> dict[str, object]:
        """The drain's entry from its record; a reopened drain's over the entry of its first end."""
        entry = entry_from_record(record, host, self.store.state.signals, alive)
        first = self.history.find(record.drain_id) if record.late else None
        return rejoined(first, entry) if first is not None and first.get("outcome") is not None else entry

    def _guarded(self, step: Callable[..., T], *args: object) -> T | None:
        """The history is the account, not the drain: a bug in writing it must not stop the daemon from
        ending a drain or showing its state. Counted, logged once, and the daemon goes on (None)."""
        with self.outputs.guarded(Output.HISTORY):
            return step(*args)
        return None

    def tick(self, now: float) -> None:
        """Now and then: write what a full disk held back."""
        if self.history.unwritten and now >= self._next_retry:
            self._next_retry = now + RETRY_EVERY
            self._guarded(self._retry)

    def next_due(self) -> float | None:
        """When `tick` next has something to write (monotonic), or None: nothing is held back."""
        return self._next_retry if self.history.unwritten else None

    def _retry(self) -> None:
        self.history.retry()
        self._persisted()

    # -- helpers -------------------------------------------------------------------------------------

    def _from_file(
        self, drain: ActiveDrain, saved: SavedState, outcome: str, why: str, alive: Alive | None,
        ended_at: float | None = None,
    ) -> None:  # fmt: skip
        opened = replace(self._opened(drain, saved.events), on_timeout=saved.on_timeout)
        signals = [s for s in saved.signals if s.intent_at >= drain.started]  # of this drain only
        host = self._host(drain.drain_id)
        ended = self.clock.wall() if ended_at is None else ended_at
        entry = entry_from_saved(opened, host, signals, outcome, ended, why, alive)
        log.warning("drain %s written to the history from the state file: %s", drain.drain_id, why)
        self.history.append(entry)

    def _opened(self, drain: ActiveDrain, events: Iterable[Event]) -> DrainRecord:
        """The drain as the lifecycle knows it, nothing done yet: its event is the first of those it
        serves, else what its opening entry says (its events cleared while the daemon was down)."""
        served = sorted((e for e in events if e.event_id in drain.event_ids), key=lambda e: e.first_seen)
        opened = self.history.find(drain.drain_id) or {}
        key, value = "", ""
        event = opened.get("event")
        if served:
            key, value = WatchedKey(served[0].source).path, served[0].value
        elif isinstance(event, dict):
            key, value = str(event.get("key", "")), str(event.get("value", ""))
        return DrainRecord.opened(
            drain.drain_id, drain.started, drain.deadline, self.config.on_timeout,
            bool(opened.get("dry_run", self.config.dry_run)), late=drain.late, event_key=key,
            event_value=value, event_ids=tuple(drain.event_ids),
        )  # fmt: skip

    def _host(self, drain_id: str) -> Host:
        """The host as known now; before the metadata server has answered since a restart, as the drain's
        opening entry named it."""
        host = host_fields(self.host(), known_only=True)
        known = (self.history.find(drain_id) or {}).get("host")
        if not host and isinstance(known, dict):
            host = {str(k): str(v) for k, v in known.items()}
        return host

    def _persisted(self) -> None:
        with self.outputs.guarded(Output.METRICS):
            self.metrics.history_persisted.set(0 if self.history.write_error else 1)


def _serving(record: DrainRecord, opened: DrainRecord) -> DrainRecord:
    """The drain's record with its id and the events it serves as the lifecycle knows them now (an event
    may have joined it since it started); what it did, its start and its deadline are the record's own."""
    return replace(record, drain_id=opened.drain_id, event_key=opened.event_key,
                   event_value=opened.event_value, event_ids=opened.event_ids)  # fmt: skip
