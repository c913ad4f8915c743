"""The metrics: all present from start-up, bounded labels, and clean for promtool."""

from __future__ import annotations

import math
import shutil
import subprocess

import pytest
from prometheus_client import generate_latest

from watchdog.core.identity import LABELS as HOST_LABELS
from watchdog.core.metadata_values import MaintenanceKind
from watchdog.core.process import Holder, ProcessIdentity
from watchdog.core.vocabulary import (
    DEFAULT_MAINTENANCE_GRACE,
    FINISHED_OUTCOMES,
    WATCHED_KEYS,
    DaemonState,
    Outcome,
    SigtermDisposition,
)
from watchdog.core.workload import NO_WORKLOAD, Workload, WorkloadKind
from watchdog.surface.metrics import (
    DISPOSITIONS,
    DRAIN_BUCKETS,
    ENDPOINTS,
    MAINTENANCE_VALUES,
    OUTCOMES,
    SIGNALS,
    STATES,
    WORKLOAD_KINDS,
    Metrics,
)

KINDS = ("timeout", "http_5xx")


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_every_series_exists_from_start_up() -> None:
    metrics = Metrics(error_kinds=KINDS)
    assert value(metrics, "tpu_watchdog_state", state="idle") == 1
    assert all(value(metrics, "tpu_watchdog_state", state=s) == 0 for s in STATES if s != "idle")
    assert value(metrics, "tpu_watchdog_maintenance_event", value="NONE") == 1
    assert all(value(metrics, "tpu_watchdog_signals_sent_total", signal=s) == 0 for s in SIGNALS)
    assert all(value(metrics, "tpu_watchdog_drains_total", outcome=o) == 0 for o in OUTCOMES)
    assert all(
        value(metrics, "tpu_watchdog_metadata_errors_total", endpoint=e, kind=k) == 0
        for e in ENDPOINTS
        for k in KINDS
    )
    start = value(metrics, "tpu_watchdog_upcoming_maintenance_window_start_timestamp_seconds")
    assert start is not None
    assert math.isnan(start)
    deadline = value(metrics, "tpu_watchdog_drain_deadline_timestamp_seconds")
    assert deadline is not None
    assert math.isnan(deadline)
    assert value(metrics, "tpu_watchdog_drain_duration_seconds_count") == 0
    assert value(metrics, "tpu_watchdog_drain_duration_seconds_bucket", le="330.0") == 0


def test_the_label_values_are_the_vocabularys() -> None:
    """Each label set is what it shows, in its order: the daemon's states, the finished outcomes, the
    kinds of maintenance event, the watched keys' sources."""
    assert [DaemonState(s) for s in STATES] == list(DaemonState)
    assert [Outcome(o) for o in OUTCOMES] == list(FINISHED_OUTCOMES)
    assert [MaintenanceKind(v) for v in MAINTENANCE_VALUES] == list(MaintenanceKind)
    assert [k.source for k in WATCHED_KEYS] == list(ENDPOINTS)
    assert DEFAULT_MAINTENANCE_GRACE in DRAIN_BUCKETS  # a drain that needed SIGKILL shows past it


def test_the_zero_initialised_series_cover_every_member() -> None:
    metrics = Metrics(error_kinds=KINDS)
    assert all(value(metrics, "tpu_watchdog_state", state=s.value) is not None for s in DaemonState)
    assert all(value(metrics, "tpu_watchdog_drains_total", outcome=o.value) == 0 for o in FINISHED_OUTCOMES)
    assert all(
        value(metrics, "tpu_watchdog_maintenance_event", value=k.value) is not None for k in MaintenanceKind
    )
    assert all(
        value(metrics, "tpu_watchdog_metadata_errors_total", endpoint=key.source, kind=kind) == 0
        for key in WATCHED_KEYS
        for kind in KINDS
    )


def test_state_and_event_are_one_hot() -> None:
    metrics = Metrics()
    metrics.set_state("draining")
    assert [value(metrics, "tpu_watchdog_state", state=s) for s in STATES] == [0, 1, 0, 0, 0]
    metrics.set_maintenance_event("SOMETHING_NEW")
    assert value(metrics, "tpu_watchdog_maintenance_event", value="UNKNOWN") == 1
    assert value(metrics, "tpu_watchdog_maintenance_event", value="NONE") == 0
    assert value(metrics, "tpu_watchdog_maintenance_event", value="SOMETHING_NEW") is None


def test_host_info_is_replaced_not_accumulated() -> None:
    metrics = Metrics()
    metrics.set_host_info({"instance_id": "1", "accelerator_type": "v4-8", "worker_id": "0", "zone": "z"})
    labels = dict.fromkeys(HOST_LABELS, "")
    assert value(metrics, "tpu_watchdog_host_info", **labels) is None  # the start-up series, replaced
    labels.update(instance_id="1", accelerator_type="v4-8", worker_id="0", zone="z")
    assert value(metrics, "tpu_watchdog_host_info", **labels) == 1
    output = generate_latest(metrics.registry).decode()
    assert output.count("tpu_watchdog_host_info{") == 1


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (make test installs it)")
def test_promtool_finds_nothing_to_say() -> None:
    metrics = Metrics(error_kinds=KINDS)
    metrics.set_state("drained")
    metrics.signals_sent.labels("SIGTERM").inc()
    metrics.drains.labels("exited").inc()
    metrics.drain_duration.observe(3.2)
    checked = subprocess.run(
        ["promtool", "check", "metrics"],
        input=generate_latest(metrics.registry),
        capture_output=True,
        check=False,
        timeout=30,
    )
    assert checked.returncode == 0, checked.stderr.decode()
    assert checked.stdout == b""
    assert checked.stderr == b""


def test_holders_by_sigterm_disposition() -> None:
    metrics = Metrics()
    assert [SigtermDisposition(d) for d in DISPOSITIONS] == list(SigtermDisposition)
    name = "tpu_watchdog_device_holders_by_sigterm"
    assert {d: value(metrics, name, disposition=d) for d in DISPOSITIONS} == dict.fromkeys(DISPOSITIONS, 0)
    caught, default = SigtermDisposition.CAUGHT, SigtermDisposition.DEFAULT
    holders = [Holder(ProcessIdentity(pid, 1), "p", (), 0, (), sigterm=kind)
               for pid, kind in enumerate([caught, default, default, None])]  # fmt: skip
    metrics.set_holders(holders)
    assert value(metrics, "tpu_watchdog_device_holders") == 4
    counts = {d: value(metrics, name, disposition=d) for d in DISPOSITIONS}
    assert counts == {"caught": 1, "ignored": 0, "default": 2}  # the unknown one counts in none
    metrics.set_holders(holders[:1])
    assert value(metrics, name, disposition="default") == 0


def test_holders_by_kind_counts_pods_units_and_the_rest_never_names_them() -> None:
    metrics = Metrics()
    assert [WorkloadKind(k) for k in WORKLOAD_KINDS] == list(WorkloadKind)
    name = "tpu_watchdog_device_holders_by_kind"
    assert {k: value(metrics, name, kind=k) for k in WORKLOAD_KINDS} == dict.fromkeys(WORKLOAD_KINDS, 0)
    pod = Workload(pod_uid="8d3f5c2a-1b4e-4c6d-9e8f-0a1b2c3d4e5f", pod_name="trainer-0")
    workloads = [pod, pod, Workload(unit="train.service"), NO_WORKLOAD]
    holders = [Holder(ProcessIdentity(pid, 1), "p", (), 0, (), workload=w) for pid, w in enumerate(workloads)]
    metrics.set_holders(holders)
    counts = {k: value(metrics, name, kind=k) for k in WORKLOAD_KINDS}
    assert counts == {"pod": 2, "container": 0, "systemd_unit": 1, "none": 1}
    exposed = generate_latest(metrics.registry).decode()
    assert "trainer-0" not in exposed  # one series per kind: never a pod, unit or container name
    assert "train.service" not in exposed


def test_no_created_series_but_every_counter_and_histogram_sample_stays() -> None:
    metrics = Metrics(error_kinds=KINDS)
    metrics.signals_sent.labels("SIGTERM").inc()
    metrics.drain_duration.observe(3.2)
    text = generate_latest(metrics.registry).decode()
    assert "_created" not in text
    assert 'tpu_watchdog_signals_sent_total{signal="SIGTERM"} 1.0' in text
    assert "tpu_watchdog_drain_duration_seconds_count 1.0" in text
    assert 'tpu_watchdog_drain_duration_seconds_bucket{le="5.0"} 1.0' in text
    assert value(metrics, "tpu_watchdog_drains_total", outcome="exited") == 0
