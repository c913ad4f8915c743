"""What the daemon says about metadata errors and its state file: counted every time, said once per change."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from watchdog.config.settings import default_config
from watchdog.core.clock import SystemClock
from watchdog.core.lifecycle import Lifecycle
from watchdog.core.process import Holder, ProcessIdentity
from watchdog.core.stop import Stop
from watchdog.core.vocabulary import SigtermDisposition
from watchdog.core.workload import Workload
from watchdog.daemon.outputs import Outputs
from watchdog.daemon.reporting import Reporter
from watchdog.daemon.view import StatusView
from watchdog.metadata.errors import ErrorKind, MetadataError
from watchdog.metadata.transport import MetadataTransport
from watchdog.metadata.watch import MetadataWatcher, WatchFailed
from watchdog.store.statefile import StateStore
from watchdog.surface.metrics import Metrics

KEY = "instance/maintenance-event"


def reporter(tmp_path: Path) -> Reporter:
    metrics = Metrics(error_kinds=[k.value for k in ErrorKind])
    watcher = MetadataWatcher(MetadataTransport("127.0.0.1:9"), lambda _: None, Stop())
    config = dataclasses.replace(default_config(), state_dir=str(tmp_path))
    view = StatusView(config, SystemClock(), watcher, Lifecycle(), CollectorRegistry())
    return Reporter(metrics, view, StateStore(str(tmp_path)), "drain", Outputs(metrics))


def errors(r: Reporter, kind: str) -> float:
    value = r.metrics.registry.get_sample_value(
        "tpu_watchdog_metadata_errors_total", {"endpoint": "maintenance-event", "kind": kind}
    )
    return value or 0.0


def test_each_error_is_counted_and_a_warning_said_once_per_change_of_kind(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    r = reporter(tmp_path)
    caplog.set_level(logging.DEBUG, logger="tpu-watchdog")
    refused = WatchFailed(KEY, MetadataError(ErrorKind.CONNECTION_REFUSED, KEY, "refused"), 0.0)
    for _ in range(3):
        r.metadata_failed(refused)
    r.metadata_failed(WatchFailed(KEY, MetadataError(ErrorKind.TIMEOUT, KEY, "slow"), 0.0))
    assert errors(r, "connection_refused") == 3
    assert errors(r, "timeout") == 1
    warnings = [rec for rec in caplog.records if rec.levelno == logging.WARNING]
    assert len(warnings) == 2  # refused once, then timeout: the repeats only at debug


def test_a_state_file_that_cannot_be_written_is_said_once_and_its_return_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    r = reporter(tmp_path)
    r.store.write_error = OSError(28, "No space left on device")
    r.persistence()
    r.persistence()
    assert r.view.state_error is not None
    assert "No space left on device" in r.view.state_error
    assert r.metrics.registry.get_sample_value("tpu_watchdog_state_persisted") == 0
    r.store.write_error = None
    r.persistence()
    assert r.view.state_error is None
    assert r.metrics.registry.get_sample_value("tpu_watchdog_state_persisted") == 1
    said = [rec.getMessage() for rec in caplog.records if "PERSISTED" in rec.getMessage().upper()]
    assert len(said) == 2, said  # not persisted (once), persisted again (once)


def test_a_holder_that_will_lose_its_progress_is_said_once_after_two_scans(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    r = reporter(tmp_path)
    caught, default, ignored = (SigtermDisposition.CAUGHT, SigtermDisposition.DEFAULT,
                                SigtermDisposition.IGNORED)  # fmt: skip
    starting = Holder(ProcessIdentity(10, 1), "train", (), 0, ("/dev/accel0",), sigterm=default)
    plain = Holder(ProcessIdentity(11, 1), "plain", (), 0, ("/dev/accel0",), sigterm=default)
    deaf = Holder(ProcessIdentity(12, 1), "deaf", (), 0, ("/dev/accel0",), sigterm=ignored)
    ready = dataclasses.replace(starting, sigterm=caught)  # it reached jax.distributed.initialize()
    with caplog.at_level(logging.WARNING, "tpu-watchdog"):
        r.holders_scanned([starting, plain, deaf])
        assert caplog.records == []  # one scan is not enough: a JAX job is default until it initializes
        r.holders_scanned([ready, plain, deaf])
        r.holders_scanned([ready, plain, deaf])
    said = [record.getMessage() for record in caplog.records]
    assert len(said) == 2
    assert "pid 11 (plain) holds the TPU with SIGTERM default" in said[0]
    assert "pid 12 (deaf) holds the TPU with SIGTERM ignored" in said[1]
    assert [h.name for h in r.view.holders] == ["train", "plain", "deaf"]
    gauge = "tpu_watchdog_device_holders_by_sigterm"
    assert r.metrics.registry.get_sample_value(gauge, {"disposition": "default"}) == 1


def test_a_holder_that_will_lose_its_progress_is_named_by_its_pod(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The not-ready warning names the pod to page, in words and in journal fields of their own."""
    r = reporter(tmp_path)
    pod = Workload(pod_uid="8d3f5c2a-1b4e-4c6d-9e8f-0a1b2c3d4e5f", pod_namespace="ml", pod_name="trainer-0")
    holder = Holder(ProcessIdentity(11, 1), "python3", (), 0, ("/dev/accel0",),
                    sigterm=SigtermDisposition.DEFAULT, workload=pod)  # fmt: skip
    with caplog.at_level(logging.WARNING, "tpu-watchdog"):
        r.holders_scanned([holder])
        r.holders_scanned([holder])
    (said,) = caplog.records
    assert "pid 11 (python3, pod ml/trainer-0) holds the TPU with SIGTERM default" in said.getMessage()
    journal = said.__dict__
    assert (journal["TPU_WATCHDOG_WORKLOAD"], journal["TPU_WATCHDOG_POD_NAME"]) == (
        "pod ml/trainer-0",
        "trainer-0",
    )
    assert "TPU_WATCHDOG_CONTAINER_NAME" not in journal  # only what is known


def test_a_listener_that_cannot_bind_is_said_once_counted_each_time_and_its_bind_said_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    r = reporter(tmp_path)
    changes = [r.listener("127.0.0.1:9478", "Address already in use") for _ in range(3)]
    assert changes == [True, False, False]  # STATUS= once
    assert "HTTP NOT LISTENING on 127.0.0.1:9478 (Address already in use)" in r.view.summary()
    assert r.view.http["error"] == "Address already in use"
    assert r.metrics.registry.get_sample_value("tpu_watchdog_output_errors_total", {"output": "http"}) == 3
    assert r.listener("127.0.0.1:9478", None)
    assert "NOT LISTENING" not in r.view.summary()
    assert r.view.http == {"listen": "127.0.0.1:9478", "address": "127.0.0.1:9478", "error": None,
                           "failed_binds": 3}  # fmt: skip
    said = [rec.getMessage() for rec in caplog.records if "listen" in rec.getMessage()]
    assert len(said) == 2, said  # cannot listen (once), listening after all (once)
    assert said[0].startswith("cannot listen on 127.0.0.1:9478: Address already in use; protecting")
    assert said[1].endswith("listening after all")


def test_who_holds_a_device_now_is_said_in_one_place_for_status_and_the_gauges(tmp_path: Path) -> None:
    """Every scan and every departure goes through `holders_now`: /status `holders` and the gauges agree."""
    r = reporter(tmp_path)
    two = [Holder(ProcessIdentity(pid, 1), "train", (), 0, ("/dev/accel0",)) for pid in (10, 11)]
    r.holders_scanned(two)
    r.holders_now(two[1:])  # one left on its own, or a drain's rescan no longer shows it
    assert [h.pid for h in r.view.holders] == [11]
    assert r.metrics.registry.get_sample_value("tpu_watchdog_device_holders") == 1
