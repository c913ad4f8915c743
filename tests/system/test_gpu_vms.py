"""A GPU VM end to end: a real daemon against the fake metadata server serving an A3 VM's identity picks
the GPU profile by itself; on a maintenance notice it SIGTERMs the job holding a (stand-in) GPU and never
the agents holding them (copies of `sleep` named nvidia-persistenced and nvidia-smi: any SIGTERM would end
them) nor a process holding only the nodes every CUDA process opens; before-window puts the SIGTERM off."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.test_gpucheck import StandInNvml
from tests.support.daemon_harness import MAINTENANCE, UPCOMING, DaemonHarness
from tests.support.gpu import OnlyPids, StandInGpuHost, running
from tests.support.waiting import wait_for
from tests.support.workloads import Workloads
from watchdog.core.clock import utc_time
from watchdog.core.metadata_values import UpcomingMaintenance
from watchdog.fake.server import FakeMetadataServer
from watchdog.fake.vm_identity import GpuIdentity

TERMINATE = "TERMINATE_ON_HOST_MAINTENANCE"


@pytest.fixture
def gpu_host(tmp_path: Path) -> Iterator[StandInGpuHost]:
    with StandInGpuHost(tmp_path / "gpu") as host:
        yield host


def gpu_daemon(
    fake: FakeMetadataServer, state_dir: Path, workloads: Workloads, host: StandInGpuHost, **overrides: object
) -> DaemonHarness:
    fake.set_identity(GpuIdentity())  # a3-highgpu-8g: no TPU attributes, on-host-maintenance TERMINATE
    pids = [p.pid for p in host.processes]
    return DaemonHarness(
        state_dir, fake, workloads, nvidia_devices=(host.pattern,),
        wiring={"scanner": None, "narrow": lambda inner: OnlyPids(inner, pids), "gpus": StandInNvml()},
        **overrides,
    )  # fmt: skip


def test_a_gpu_vm_drains_its_job_and_leaves_the_agents_alone(
    fake: FakeMetadataServer, state_dir: Path, workloads: Workloads, gpu_host: StandInGpuHost,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    caplog.set_level(logging.INFO, "tpu-watchdog")
    job = gpu_host.hold("torchrun", "nvidia0", "nvidiactl", "nvidia-uvm")
    persistenced = gpu_host.hold("nvidia-persistenced", "nvidia0", "nvidia1")
    smi = gpu_host.hold("nvidia-smi", "nvidia0", "nvidia1", "nvidiactl")
    probe = gpu_host.hold("cuda-probe", "nvidiactl", "nvidia-uvm", "nvidia-caps/nvidia-cap1")
    with gpu_daemon(fake, state_dir, workloads, gpu_host) as harness:
        said = [r.getMessage() for r in caplog.records]
        assert any("accelerator profile nvidia-gpu (machine type a3-highgpu-8g)" in line for line in said)
        assert any(line.startswith("tpu-watchdog started") and gpu_host.pattern in line for line in said)
        fake.set(MAINTENANCE, TERMINATE)
        wait_for(lambda: not running(job), timeout=20, what="the job ending on its SIGTERM")
        harness.wait_state("drained")
        record = harness.daemon.view.record
        assert record is not None
        assert {identity.pid for identity in record.processes} == {job.pid}
    assert job.returncode == -15  # SIGTERM's default action
    assert all(map(running, (persistenced, smi, probe)))  # never signalled: a SIGTERM would have ended them


def test_before_window_sigterms_the_lead_before_the_announced_start(
    fake: FakeMetadataServer, state_dir: Path, workloads: Workloads, gpu_host: StandInGpuHost,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """The notice comes with a window 603 s away and a lead of 600 s: the job trains on for 3 s, then
    gets its SIGTERM; the grace counts from then."""
    caplog.set_level(logging.INFO, "tpu-watchdog")
    job = gpu_host.hold("torchrun", "nvidia0")
    with gpu_daemon(
        fake, state_dir, workloads, gpu_host, maintenance_sigterm="before-window", maintenance_lead=600.0
    ) as harness:
        # A whole second, as announced: the window's time is written to the millisecond, and the loop
        # wakes at the due time itself, so a finer `start` would be a hair later than the one it reads.
        start = float(int(time.time()) + 603)
        fake.set(UPCOMING, {"window_start_time": utc_time(start), "window_end_time": utc_time(start + 3600),
                            "maintenance_status": "PENDING", "type": "SCHEDULED"})  # fmt: skip

        def window_known() -> bool:
            upcoming = harness.daemon.view.values.get("upcoming-maintenance")
            return isinstance(upcoming, UpcomingMaintenance) and upcoming.notice is not None

        wait_for(window_known, what="the daemon knowing the window")
        fake.set(MAINTENANCE, TERMINATE)
        wait_for(
            lambda: any("before the maintenance window starts" in r.getMessage() for r in caplog.records),
            what="the daemon saying when the SIGTERM will go",
        )
        assert running(job)
        assert harness.state == "idle"
        wait_for(lambda: not running(job), timeout=20, what="the job ending on its SIGTERM")
        ended = time.time()
        harness.wait_state("drained")
        assert ended >= start - 600
        deadline = harness.daemon.lifecycle.events["maintenance-event"].deadline
        assert deadline is not None
        assert deadline >= start - 600 + harness.config.maintenance_grace
