"""What the daemon shows: /status, /healthz, /readyz, systemd's STATUS line.

A subscriber (`daemon/telling.py`): the lifecycle it shows is a copy taken as each moment is told, after the
history has written the moment down, so /status never shows a drain ended that its `last_drain` does not
have yet. The loop thread writes the daemon's other facts here; HTTP threads read them. Each field is
replaced whole (never mutated in place), so a reader sees either the old or the new value.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from watchdog import __version__
from watchdog.config.settings import Config
from watchdog.core.clock import Clock
from watchdog.core.devices import MatchedDevice
from watchdog.core.drain_record import DrainRecord
from watchdog.core.identity import HostIdentity
from watchdog.core.lifecycle import Lifecycle
from watchdog.core.metadata_values import WatchedValue
from watchdog.core.moments import HoldersFound, Moment, ProcessSignalled
from watchdog.core.process import Holder, ProcessIdentity
from watchdog.core.vocabulary import Output
from watchdog.metadata.watch import MetadataWatcher, WatchMode
from watchdog.store.history import HistoryFile

LOOP_SILENT_AFTER = 30.0  # /healthz and /livez fail when the loop has not ticked for this long
# /healthz fails when a watched key has had no good answer for this long (or none yet since start): errors
# retried within it are weather (a 503 storm, a restart of the metadata server); past it, this host could
# miss an event.
METADATA_TOLERANCE = 180.0
RECENT_DRAINS = 5  # drains /status carries (`tpu-watchdog history` has them all)


class Account(Protocol):
    """The daemon's account of its drains, as /status shows it (`HistoryEntries`, a subscriber)."""

    history: HistoryFile
    # The history entry of the last drain that ended in this run (`recent_drains`' shape); None until one
    # has (a drain cut short by the daemon's stop has not), or when building its entry failed.
    last_drain: dict[str, object] | None

    def live(self, record: DrainRecord) -> dict[str, object] | None:
        """The running drain as the history will show it."""


class StatusView:
    """Implements the HTTP `Surface`: status, health and readiness from the daemon's current facts."""

    output = Output.STATUS  # what its failures are counted as

    def __init__(
        self,
        config: Config,
        clock: Clock,
        watcher: MetadataWatcher,
        lifecycle: Lifecycle,
        registry: CollectorRegistry,
        account: Account | None = None,
        webhooks: Callable[[], list[dict[str, object]]] = list,
    ) -> None:
        """`lifecycle`: the loop's, as shown until the first moment is told. `account`: the history, and the
        drains' entries in it (None: no history, a test's view). `webhooks`: each webhook in use, its URL
        redacted (`Notices.webhooks`)."""
        self.config = config
        self.account = account
        self.clock = clock
        self.watcher = watcher
        self.lifecycle = copy.deepcopy(lifecycle)  # replaced whole by `told`
        self.registry = registry
        self.values: dict[str, WatchedValue] = {}
        self.holders: list[Holder] = []
        self.devices: tuple[MatchedDevice, ...] = ()  # what the patterns matched at the last look, judged
        self.record: DrainRecord | None = None  # the drain in progress, as last published
        # Which host, slice and Multislice job this is, as far as known yet (daemon/identity_learner.py):
        # /status, and whatever reports an event elsewhere (history, webhooks) to say where it happened.
        self.identity = HostIdentity()
        self.metadata_tolerance = METADATA_TOLERANCE
        self.state_error: str | None = None  # why the state file is not being written, while it is not
        self.http_error: str | None = None  # why the HTTP listener cannot bind, while it cannot
        # /status `http`: where it listens (None until bound) and how many binds failed before
        self.http: dict[str, object] = {"listen": str(config.listen), "address": None, "error": None,
                                        "failed_binds": 0}  # fmt: skip
        self.webhooks = webhooks
        self._started = clock.wall()
        self._last_tick = clock.monotonic()

    @property
    def host(self) -> dict[str, str]:
        """The identity as text, every field ("" where unknown): what a notice (a webhook, history) names
        the host by. Read-only: the identity thread replaces `identity` whole."""
        return self.identity.labels()

    def loop_ticked(self) -> None:
        self._last_tick = self.clock.monotonic()

    def drain_update(self, record: DrainRecord) -> None:
        self.record = record

    def told(self, moment: Moment, lifecycle: Lifecycle) -> None:
        """The lifecycle as the loop left it; the drain's own moments change none of it."""
        if not isinstance(moment, (HoldersFound, ProcessSignalled)):
            self.lifecycle = copy.deepcopy(lifecycle)

    def name_of(self, identity: ProcessIdentity) -> str:
        record = self.record
        if record is not None and identity in record.processes:
            return record.processes[identity].name
        return next((h.name for h in self.holders if h.identity == identity), "")

    def summary(self) -> str:
        life = self.lifecycle
        state = life.state.value
        events = ", ".join(f"{e.source}={e.value}" for e in life.events.values())
        unsaved = "; STATE NOT PERSISTED" if self.state_error else ""
        if self.http_error:
            unsaved += f"; HTTP NOT LISTENING on {self.config.listen} ({self.http_error}), retrying"
        if life.drain is not None:
            left = max(0.0, life.drain.deadline - self.clock.wall())
            dry = " (dry run: nothing is sent)" if self.config.dry_run else ""
            return f"{state}: {events}; {left:.0f} s to the deadline{dry}{unsaved}"
        return (f"{state}: {events}" if events else f"{state}: watching the metadata server") + unsaved

    def liveness(self) -> tuple[bool, str]:
        """The process works (its loop ticks): what a restart could fix. A metadata outage is not."""
        silent = self.clock.monotonic() - self._last_tick
        if silent > LOOP_SILENT_AFTER:
            return False, f"unhealthy: the main loop has not ticked for {silent:.0f} s"
        return True, "ok"

    def health(self) -> tuple[bool, str]:
        """Live, every watched key has answered since start, and each answered well within
        `metadata_tolerance` (errors are retried meanwhile and counted in
        tpu_watchdog_metadata_errors_total). Before its first good answer a key is not healthy: until
        then the daemon cannot know whether an event is on (the first answer normally takes milliseconds)."""
        live, reason = self.liveness()
        if not live:
            return live, reason
        now = self.clock.wall()
        for status in self.watcher.statuses():
            if status.mode in (WatchMode.UNSUPPORTED, WatchMode.STOPPED):
                continue
            error = status.last_error.value if status.last_error else "none yet"
            if status.last_success is None:
                return False, (
                    f"unhealthy: no good answer yet from {status.key} since start {now - self._started:.0f} "
                    f"s ago (last error: {error})"
                )
            if now - status.last_success > self.metadata_tolerance:
                return False, (
                    f"unhealthy: no good answer from {status.key} for {now - status.last_success:.0f} s "
                    f"(tolerance {self.metadata_tolerance:g} s; last error: {error})"
                )
        return True, "ok"

    def readiness(self) -> tuple[bool, str]:
        events = self.lifecycle.events
        if events:
            what = ", ".join(f"{e.source}={e.value}" for e in events.values())
            return False, f"not ready: {self.lifecycle.state.value} for {what}: take no new work"
        return True, "ready"

    def status(self) -> dict[str, Any]:
        life = self.lifecycle
        now = self.clock.wall()
        record = self.record if life.drain is not None else None
        account = self.account
        return {
            "version": __version__,
            "state": life.state.value,
            "dry_run": self.config.dry_run,
            "events": [dataclasses.asdict(e) for e in life.events.values()],
            "drain": None
            if life.drain is None
            else {
                "started": life.drain.started,
                "deadline": life.drain.deadline,
                "time_left": max(0.0, life.drain.deadline - now),
                "on_timeout": self.config.on_timeout,
                "processes": (account.live(record) or {}).get("processes", []) if record and account else [],
            },
            "recent_drains": account.history.recent(RECENT_DRAINS) if account else [],
            "history_file": self._history_file(),
            "last_drain": account.last_drain if account else None,
            "last_outcome": life.last_outcome,
            "devices": [device.to_dict() for device in self.devices],
            "holders": [
                {
                    "pid": h.pid,
                    "start_time": h.identity.start_time,
                    "name": h.name,
                    "devices": list(h.devices),
                    "sigterm": h.sigterm.value if h.sigterm else None,
                    "workload": h.workload.to_dict(),
                }
                for h in self.holders
            ],
            "metadata": {
                s.key: {
                    "mode": s.mode.value,
                    "value": s.value.describe() if s.value is not None else None,
                    "last_success": s.last_success,
                    "last_error": s.last_error.value if s.last_error else None,
                }
                for s in self.watcher.statuses()
            },
            "host": self.identity.to_dict(),
            "state_file": {"persisted": self.state_error is None, "error": self.state_error},
            "http": self.http,
            "webhooks": self.webhooks(),
            "now": now,
        }

    def _history_file(self) -> dict[str, object]:
        if self.account is None:
            return {"path": None, "persisted": True, "error": None}
        history = self.account.history
        error = history.write_error
        return {
            "path": history.path,
            "persisted": error is None,
            "error": error and str(error.strerror or error),
        }
