"""The daemon's Prometheus metrics. Their names and labels are a public interface: keep them stable.

Every series exists from start-up (zero-initialised), and labels are bounded: a state, a key value class, a
signal, an outcome, an endpoint and an error kind. Never a PID or an event id: those go to the journal.
No `_created` series: see `NoCreatedRegistry`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.samples import Sample

from watchdog import __version__
from watchdog.core.identity import LABELS as HOST_LABELS
from watchdog.core.ladder import ladder_for
from watchdog.core.metadata_values import MaintenanceKind
from watchdog.core.process import Holder
from watchdog.core.vocabulary import FINISHED_OUTCOMES, WATCHED_KEYS, DaemonState, Output, SigtermDisposition
from watchdog.core.workload import WorkloadKind
from watchdog.surface.webhooks import FailureReason

# The label values, from the enums and keys they show (tests/surface/test_metrics.py holds them to it).
STATES = tuple(state.value for state in DaemonState)
MAINTENANCE_VALUES = tuple(kind.value for kind in MaintenanceKind)
SIGNALS = tuple(step.name for step in ladder_for("kill").steps)  # the signals a drain sends, in order
OUTCOMES = tuple(outcome.value for outcome in FINISHED_OUTCOMES)
ENDPOINTS = tuple(key.source for key in WATCHED_KEYS)
DISPOSITIONS = tuple(disposition.value for disposition in SigtermDisposition)
WORKLOAD_KINDS = tuple(kind.value for kind in WorkloadKind)  # never a pod, unit or container name
WEBHOOK_FAILURES = tuple(reason.value for reason in FailureReason)
OUTPUTS = tuple(output.value for output in Output)
# Buckets reach past the 300 s maintenance grace, so a drain that needed SIGKILL shows in its own bucket.
DRAIN_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 180, 240, 300, 310, 330, 360, 600)


class NoCreatedRegistry(CollectorRegistry):
    """A registry that leaves out the `_created` sample prometheus_client adds to every counter and
    histogram: an undocumented series per label set, which nothing here alerts or graphs on. Filtered at
    collect time, because `disable_created_metrics()` is process-wide and only exists from
    prometheus-client 0.17 on, while Ubuntu 22.04's python3-prometheus-client (what the .deb uses) is 0.9."""

    def collect(self) -> Iterator[Metric]:
        for family in super().collect():
            kept = [s for s in family.samples if not s.name.endswith("_created")]
            if len(kept) != len(family.samples):
                family = _with_samples(family, kept)
            yield family


def _with_samples(family: Metric, samples: list[Sample]) -> Metric:
    copy = Metric(family.name, family.documentation, family.type, family.unit)
    copy.samples = samples
    return copy


class Metrics:
    """All series of one daemon, on its own registry (tests run several daemons in one process)."""

    def __init__(self, error_kinds: Iterable[str] = (), registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else NoCreatedRegistry()
        r = self.registry
        ProcessCollector(registry=r)
        self.state = Gauge("tpu_watchdog_state", "1 for the daemon's current state.", ["state"], registry=r)
        self.maintenance_event = Gauge(
            "tpu_watchdog_maintenance_event",
            "1 for the current value of instance/maintenance-event (UNKNOWN: a well-formed value not known).",
            ["value"],
            registry=r,
        )
        self.preempted = Gauge("tpu_watchdog_preempted", "1 when instance/preempted is TRUE.", registry=r)
        self.window_start = Gauge(
            "tpu_watchdog_upcoming_maintenance_window_start_timestamp_seconds",
            "Start of the upcoming maintenance window (NaN when none is scheduled).",
            registry=r,
        )
        self.window_end = Gauge(
            "tpu_watchdog_upcoming_maintenance_window_end_timestamp_seconds",
            "End of the upcoming maintenance window (NaN when none is scheduled).",
            registry=r,
        )
        self.device_holders = Gauge(
            "tpu_watchdog_device_holders", "Processes holding a TPU device file at the last scan.", registry=r
        )
        self.holders_by_sigterm = Gauge(
            "tpu_watchdog_device_holders_by_sigterm",
            "TPU holders at the last scan by what SIGTERM does to them now: caught (a handler runs), "
            "ignored (runs on until SIGKILL), default (dies at once, saving nothing).",
            ["disposition"],
            registry=r,
        )
        self.holders_by_kind = Gauge(
            "tpu_watchdog_device_holders_by_kind",
            "TPU holders at the last scan by what they belong to: pod, container, systemd_unit, none "
            "(docs/holder-identity.md; the names are in /status and the journal, never in a label).",
            ["kind"],
            registry=r,
        )
        self.signals_sent = Counter(
            "tpu_watchdog_signals_sent", "Signals sent to TPU holders.", ["signal"], registry=r
        )
        self.drains = Counter("tpu_watchdog_drains", "Drains finished, by outcome.", ["outcome"], registry=r)
        self.dry_run_drains = Counter(
            "tpu_watchdog_dry_run_drains",
            "Rehearsals (dry-run drains: nothing was sent) finished, by the outcome they rehearsed.",
            ["outcome"],
            registry=r,
        )
        self.dry_run = Gauge(
            "tpu_watchdog_dry_run", "1 while the daemon runs in dry run: it signals nothing.", registry=r
        )
        self.drain_duration = Histogram(
            "tpu_watchdog_drain_duration_seconds",
            "From the first SIGTERM to the end of a drain.",
            buckets=DRAIN_BUCKETS,
            registry=r,
        )
        self.drain_deadline = Gauge(
            "tpu_watchdog_drain_deadline_timestamp_seconds",
            "When the drain in progress will SIGKILL what is left (NaN when no drain is running).",
            registry=r,
        )
        self.metadata_errors = Counter(
            "tpu_watchdog_metadata_errors",
            "Failed metadata requests, by watched key and error kind.",
            ["endpoint", "kind"],
            registry=r,
        )
        self.metadata_last_success = Gauge(
            "tpu_watchdog_metadata_last_success_timestamp_seconds",
            "When a metadata request last succeeded (any watched key).",
            registry=r,
        )
        self.state_persisted = Gauge(
            "tpu_watchdog_state_persisted",
            "1 while the state file is written; 0 when writes fail (full or read-only disk): a restart "
            "would forget a drain in progress.",
            registry=r,
        )
        self.history_persisted = Gauge(
            "tpu_watchdog_history_persisted",
            "1 while the drain history is written; 0 when writes fail (full or read-only disk): the drains "
            "not written are kept in memory and written when the disk allows.",
            registry=r,
        )
        self.build_info = Gauge("tpu_watchdog_build_info", "Always 1; the version.", ["version"], registry=r)
        self.host_info = Gauge(
            "tpu_watchdog_host_info",
            "Always 1; which host this is (its TPU node, its place in it, its Multislice job), to group "
            "hosts by slice and job on a fleet dashboard; empty labels are unknown.",
            list(HOST_LABELS),
            registry=r,
        )
        self.devices = Gauge(
            "tpu_watchdog_devices",
            "TPU device nodes the device patterns match and the daemon watches (refused ones not counted): "
            "0 on a TPU VM means nothing is protected (docs/devices.md).",
            registry=r,
        )
        self.holders_left = Counter(
            "tpu_watchdog_holders_left",
            "TPU holders that exited on their own while this host had no event and no drain: a job that "
            "finished, or on a multi-host job another host's event ending it here.",
            registry=r,
        )
        self.webhooks_sent = Counter(
            "tpu_watchdog_webhooks_sent", "Notices delivered to a webhook (one per URL).", registry=r
        )
        self.webhook_failures = Counter(
            "tpu_watchdog_webhook_failures",
            "Notices that never reached a webhook, by why (retries_exhausted, rejected, queue_full, stopped)",
            ["reason"],
            registry=r,
        )
        self.output_errors = Counter(
            "tpu_watchdog_output_errors",
            "Failures of what the daemon tells (a log line, a metric, a webhook notice, a hook, the history, "
            "/status, sd_notify, binding the HTTP listener), by output: each was caught, logged once and "
            "never stopped a drain.",
            ["output"],
            registry=r,
        )
        self._host_info_labels: tuple[str, ...] | None = None
        self._zero_initialise(error_kinds)

    def _zero_initialise(self, error_kinds: Iterable[str]) -> None:
        self.set_state(DaemonState.IDLE.value)
        self.set_maintenance_event(MaintenanceKind.NONE.value)
        for signal_name in SIGNALS:
            self.signals_sent.labels(signal_name)
        for outcome in OUTCOMES:
            self.drains.labels(outcome)
            self.dry_run_drains.labels(outcome)
        for endpoint in ENDPOINTS:
            for kind in error_kinds:
                self.metadata_errors.labels(endpoint, kind)
        self.set_holders(())
        self.set_window(None, None)
        self.drain_deadline.set(math.nan)
        self.build_info.labels(__version__).set(1)
        self.state_persisted.set(1)
        self.history_persisted.set(1)
        self.set_host_info({})
        for reason in WEBHOOK_FAILURES:
            self.webhook_failures.labels(reason)
        for output in OUTPUTS:
            self.output_errors.labels(output)

    def set_state(self, state: str) -> None:
        for name in STATES:
            self.state.labels(name).set(1 if name == state else 0)

    def set_holders(self, holders: Sequence[Holder]) -> None:
        """The holders gauges of one scan; a holder whose disposition /proc did not tell counts in none."""
        self.device_holders.set(len(holders))
        for disposition in SigtermDisposition:
            count = sum(1 for h in holders if h.sigterm is disposition)
            self.holders_by_sigterm.labels(disposition.value).set(count)
        for kind in WorkloadKind:
            self.holders_by_kind.labels(kind.value).set(sum(1 for h in holders if h.workload.kind is kind))

    def set_maintenance_event(self, value: str) -> None:
        shown = value if value in MAINTENANCE_VALUES else MaintenanceKind.UNKNOWN.value
        for name in MAINTENANCE_VALUES:
            self.maintenance_event.labels(name).set(1 if name == shown else 0)

    def set_window(self, start: float | None, end: float | None) -> None:
        self.window_start.set(math.nan if start is None else start)
        self.window_end.set(math.nan if end is None else end)

    def set_deadline(self, deadline: float | None) -> None:
        self.drain_deadline.set(math.nan if deadline is None else deadline)

    def set_host_info(self, info: dict[str, str]) -> None:
        labels = tuple(info.get(name, "") for name in HOST_LABELS)
        # Replaced, not accumulated. Not Gauge.clear(): prometheus-client 0.9 (Ubuntu 22.04's
        # python3-prometheus-client, which the .deb uses) has no clear(); remove() exists in every version.
        if self._host_info_labels is not None and self._host_info_labels != labels:
            self.host_info.remove(*self._host_info_labels)
        self.host_info.labels(*labels).set(1)
        self._host_info_labels = labels
