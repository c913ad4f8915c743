"""The NVML cross-check's reporting, against a stand-in NVML (no GPU here: `StandInNvml` answers what a
real NVML would list), and the real scan of stand-in GPU nodes held by real processes."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.support.gpu import StandInGpuHost
from tests.support.waiting import wait_for
from watchdog.config.settings import default_config
from watchdog.core.accelerators import Profile
from watchdog.daemon.gpucheck import CrossChecked
from watchdog.daemon.outputs import Outputs
from watchdog.host.holders import scanner_for
from watchdog.surface.metrics import Metrics


class StandInNvml:
    """A stand-in for NVML (no GPU here): the compute processes it is told, or a failure."""

    def __init__(self, pids: Mapping[int, frozenset[int]] | None = None) -> None:
        self.pids = dict(pids or {})
        self.fail = False
        self.asked = 0

    def compute_processes(self) -> Mapping[int, frozenset[int]]:
        self.asked += 1
        if self.fail:
            raise OSError("NVML: Unknown Error")
        return self.pids


@pytest.fixture
def gpu_host(tmp_path: Path) -> Iterator[StandInGpuHost]:
    with StandInGpuHost(tmp_path / "dev") as host:
        yield host


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def checked(host: StandInGpuHost, nvml: StandInNvml, stop: threading.Event) -> CrossChecked:
    config = dataclasses.replace(default_config(), nvidia_devices=(host.pattern,))
    return CrossChecked(scanner_for(config, Profile.NVIDIA_GPU), nvml, stop, outputs=Outputs(Metrics()))


def test_who_one_sees_and_the_other_does_not_is_said_once(
    gpu_host: StandInGpuHost, stop: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    """A job that opened its GPU but has no CUDA context yet is the scan's alone; a process NVML lists
    that holds no node the scan matched (here: a pid of another PID namespace) is NVML's alone."""
    early = gpu_host.hold("torchrun", "nvidia0")
    agent = gpu_host.hold("nv-hostengine", "nvidia1")
    nvml = StandInNvml({agent.pid: frozenset({1}), 4_000_000: frozenset({0})})
    scanner = checked(gpu_host, nvml, stop)
    caplog.set_level(logging.WARNING, "tpu-watchdog")

    check = scanner.compare(scanner.scan())
    assert check is not None
    assert early.pid in check.scan_only
    assert agent.pid not in check.scan_only  # NVML knows it: an agent counts as seen
    assert check.nvml_only == (4_000_000,)
    said = [r.getMessage() for r in caplog.records]
    assert any(f"{early.pid} (torchrun)" in line and "unknown to NVML" in line for line in said)
    assert any("4000000" in line and "NVML lists" in line for line in said)

    caplog.clear()
    scanner.compare(scanner.scan())
    assert not [r for r in caplog.records if "cross-check" in r.getMessage()]  # the same: not said again


def test_a_failing_nvml_is_said_once_and_changes_nothing(
    gpu_host: StandInGpuHost, stop: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    job = gpu_host.hold("torchrun", "nvidia0")
    nvml = StandInNvml()
    nvml.fail = True
    scanner = checked(gpu_host, nvml, stop)
    caplog.set_level(logging.WARNING, "tpu-watchdog")
    result = scanner.scan()
    assert job.pid in {h.pid for h in result.holders}
    assert scanner.compare(result) is None
    assert scanner.compare(result) is None
    assert [r.getMessage() for r in caplog.records].count(
        "GPU cross-check: NVML: Unknown Error; the scan alone decides, as always"
    ) == 1


def test_the_scan_hands_its_result_to_the_background_check(
    gpu_host: StandInGpuHost, stop: threading.Event
) -> None:
    """The scan returns at once; NVML is asked from the cross-check's own thread, at most once per
    interval (here the first scan's)."""
    gpu_host.hold("torchrun", "nvidia0")
    nvml = StandInNvml()
    scanner = checked(gpu_host, nvml, stop)
    scanner.scan()
    wait_for(lambda: nvml.asked == 1, what="the background cross-check asking the stand-in NVML")
    scanner.scan()  # within the interval: not asked again
    assert scanner.recheck([]) == []  # the rest is the inner scanner's
    assert nvml.asked == 1


def test_between_comparisons_no_thread_waits(gpu_host: StandInGpuHost, stop: threading.Event) -> None:
    """The cross-check's thread runs while it has a scan to compare, then ends: an idle GPU host's daemon
    has no thread waking every second to look for work."""
    gpu_host.hold("torchrun", "nvidia0")
    nvml = StandInNvml()
    now = [0.0]
    config = dataclasses.replace(default_config(), nvidia_devices=(gpu_host.pattern,))
    scanner = CrossChecked(
        scanner_for(config, Profile.NVIDIA_GPU), nvml, stop, clock=lambda: now[0], outputs=Outputs(Metrics())
    )
    scanner.scan()
    wait_for(lambda: nvml.asked == 1, what="the background cross-check asking the stand-in NVML")
    wait_for(lambda: not _cross_checking(), what="the cross-check's thread ending")
    now[0] += scanner.interval
    scanner.scan()
    wait_for(lambda: nvml.asked == 2, what="a thread again for the next comparison")


def _cross_checking() -> bool:
    return any(t.name == "gpu-cross-check" for t in threading.enumerate())
