"""Learning the host's identity: over real HTTP from the fake, retried until every key answered, each
problem said once, never fatal; and in a running daemon, in /status `host` and tpu_watchdog_host_info."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.support.daemon_harness import DaemonHarness
from tests.support.failing_logs import every_line_raising
from tests.support.ports import reserved_port
from tests.support.waiting import wait_for
from tests.support.workloads import Workloads
from watchdog.core.identity import ACCELERATOR_TYPE, TPU_ENV, WORKER_ID, HostIdentity
from watchdog.core.vocabulary import Output
from watchdog.daemon.identity_learner import learn_identity
from watchdog.daemon.outputs import Outputs
from watchdog.fake.server import FakeMetadataServer, Fault
from watchdog.fake.vm_identity import TpuIdentity
from watchdog.metadata.identity import Fetched, fetch_identity
from watchdog.metadata.transport import MetadataTransport
from watchdog.surface.metrics import Metrics

MULTISLICE = TpuIdentity("v5litepod-16", "train-b", worker=2, hosts=4, slice_id=1, num_slices=2,
                         coordinator="10.130.0.2:8476")  # fmt: skip


def learn(fake: FakeMetadataServer, stop: threading.Event | None = None) -> list[HostIdentity]:
    published: list[HostIdentity] = []
    with MetadataTransport(fake.address) as transport:
        learn_identity(lambda paths: fetch_identity(transport, paths), published.append,
                       stop or threading.Event(), first_retry=0.05, outputs=Outputs(Metrics()))  # fmt: skip
    return published


def test_failing_keys_are_asked_again_until_they_answer(
    fake: FakeMetadataServer, caplog: pytest.LogCaptureFixture
) -> None:
    fake.set_identity(MULTISLICE)
    fake.delete(WORKER_ID)  # 404: not there, asked once; agent-worker-number says it
    fake.add_fault(Fault("status", status=503, path=TPU_ENV, count=3))
    caplog.set_level(logging.INFO, "tpu-watchdog")
    published = learn(fake)
    first, last = published[0], published[-1]
    assert (first.accelerator_type, first.worker_id, first.tpu_node) == ("v5litepod-16", "2", "")  # at once
    assert last.tpu_node == "train-b"
    assert (last.slice_id, last.num_slices, last.multislice_coordinator) == ("1", "2", "10.130.0.2:8476")
    assert last.slice_hosts == 4
    tpu_env_asked = [r for r in fake.requests() if r.path.endswith(TPU_ENV)]
    assert len(tpu_env_asked) == 4  # 3 failures, then the answer
    assert len([r for r in fake.requests() if r.path.endswith(WORKER_ID)]) == 1
    unavailable = [r for r in caplog.records if "unavailable" in r.getMessage()]
    assert len(unavailable) == 1  # the same failure said once, not per retry
    assert "host identity: " in caplog.records[-1].getMessage()  # and what it learned, at the end


def test_bad_values_are_said_once_and_left_empty(
    fake: FakeMetadataServer, caplog: pytest.LogCaptureFixture
) -> None:
    fake.set(ACCELERATOR_TYPE, "v4 8; rm -rf /")
    fake.set(TPU_ENV, "NODE_ID: 'ok-node'\nthis is not a line\n")
    published = learn(fake)
    assert published[-1].accelerator_type == ""
    assert published[-1].tpu_node == "ok-node"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert any(ACCELERATOR_TYPE in w for w in warnings)


def test_an_unreachable_server_stops_with_the_daemon() -> None:
    stop = threading.Event()
    published: list[HostIdentity] = []
    with reserved_port() as refused, MetadataTransport(f"127.0.0.1:{refused}") as transport:
        thread = threading.Thread(
            target=learn_identity,
            args=(lambda paths: fetch_identity(transport, paths), published.append, stop, 0.05),
            kwargs={"outputs": Outputs(Metrics())},
        )
        thread.start()
        wait_for(lambda: bool(published), what="the empty identity published")  # known: nothing yet
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert published == [HostIdentity()]


def test_a_running_daemon_shows_its_slice(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    fake.set_identity(MULTISLICE)
    with DaemonHarness(state_dir, fake, workloads, host_info=True) as harness:
        wait_for(lambda: harness.daemon.view.identity.tpu_node == "train-b", what="the identity learned")
        host = harness.daemon.view.status()["host"]
        assert host["tpu_node"] == "train-b"
        assert host["multislice_coordinator"] == "10.130.0.2:8476"
        labels = harness.daemon.view.identity.labels()
        assert harness.metric("tpu_watchdog_host_info", **labels) == 1
        assert labels["instance_name"].endswith("-w-2")


def test_a_fetch_that_raises_is_logged_once_and_asked_again(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    def fetch(paths: Sequence[str]) -> Fetched:
        calls.append(len(paths))
        if len(calls) < 3:
            raise RuntimeError("a bug")
        return Fetched(values=dict.fromkeys(paths))  # every key answered 404

    published: list[HostIdentity] = []
    learn_identity(fetch, published.append, threading.Event(), first_retry=0.01, outputs=Outputs(Metrics()))
    assert len(calls) == 3
    assert published == [HostIdentity()]
    assert len([r for r in caplog.records if "internal error" in r.getMessage()]) == 1


def test_a_metadata_server_that_is_down_is_one_line_for_every_key(caplog: pytest.LogCaptureFixture) -> None:
    stop = threading.Event()
    caplog.set_level(logging.INFO, "tpu-watchdog")
    with reserved_port() as refused, MetadataTransport(f"127.0.0.1:{refused}") as transport:
        # One round: the first publication (nothing known) stops it.
        learn_identity(lambda paths: fetch_identity(transport, paths), lambda _: stop.set(), stop, 0.05,
                       outputs=Outputs(Metrics()))  # fmt: skip
    (said,) = [r.getMessage() for r in caplog.records if "unavailable" in r.getMessage()]
    assert "instance/id, instance/name, instance/zone" in said
    assert "(connection_refused)" in said


def test_lines_that_raise_end_neither_the_asking_nor_the_thread(fake: FakeMetadataServer) -> None:
    """The first failure's line, raising (a broken journal), once ended the asking: the labels that came
    after it were never published."""
    fake.set_identity(MULTISLICE)
    fake.add_fault(Fault(kind="status", status=503, path=ACCELERATOR_TYPE))
    outputs = Outputs(Metrics())
    published: list[HostIdentity] = []
    with every_line_raising("tpu-watchdog") as lines, MetadataTransport(fake.address) as transport:
        learn_identity(lambda paths: fetch_identity(transport, paths), published.append, threading.Event(),
                       first_retry=0.05, outputs=outputs)  # fmt: skip
    assert lines.refused("unavailable")
    assert published[-1].accelerator_type == "v5litepod-16"
    errors = outputs.metrics.registry.get_sample_value(
        "tpu_watchdog_output_errors_total", {"output": Output.LOG.value}
    )
    assert (
        errors == len([m for m in lines.refused() if m.startswith("host identity")]) == 2
    )  # the unavailable line, the last one
