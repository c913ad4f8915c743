"""The holder scan on a (stand-in) GPU host: per-GPU nodes make holders, the shared nodes never do alone,
and the GPU agents are reported apart, never as holders (real nodes, real processes, the real scanner)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gpu import StandInGpuHost
from watchdog.config.settings import default_config
from watchdog.core.accelerators import Profile
from watchdog.host.holders import ScanResult, scanner_for


@pytest.fixture
def gpu_host(tmp_path: Path) -> Iterator[StandInGpuHost]:
    with StandInGpuHost(tmp_path / "dev") as host:
        yield host


def own(result: ScanResult, host: StandInGpuHost) -> tuple[set[int], set[int]]:
    pids = {p.pid for p in host.processes}
    return {h.pid for h in result.holders} & pids, {a.pid for a in result.agents} & pids


def test_gpu_profile_watches_gpus_leaves_agents_and_shared_nodes(gpu_host: StandInGpuHost) -> None:
    job = gpu_host.hold("torchrun", "nvidia0", "nvidiactl", "nvidia-uvm")
    shared_only = gpu_host.hold("python3-cuda", "nvidiactl", "nvidia-uvm", "nvidia-caps/nvidia-cap1")
    agent = gpu_host.hold("nvidia-persistenced", "nvidia0", "nvidia1")
    exporter = gpu_host.hold("dcgm-exporter", "nvidia1")
    config = dataclasses.replace(default_config(), nvidia_devices=(gpu_host.pattern,))

    result = scanner_for(config, Profile.NVIDIA_GPU).scan()

    holders, agents = own(result, gpu_host)
    assert holders == {job.pid}
    assert agents == {agent.pid, exporter.pid}
    assert shared_only.pid not in holders | agents
    (seen,) = [h for h in result.holders if h.pid == job.pid]
    assert seen.devices == (gpu_host.path("nvidia0"),)  # the shared nodes it also holds are not devices
    assert sorted(result.devices) == sorted(map(gpu_host.path, ("nvidia0", "nvidia1")))


def test_an_extra_agent_from_the_configuration(gpu_host: StandInGpuHost) -> None:
    monitor = gpu_host.hold("site-gpu-monitor", "nvidia0")
    config = dataclasses.replace(
        default_config(), nvidia_devices=(gpu_host.pattern,), gpu_agents=("site-gpu-monitor",)
    )
    assert own(scanner_for(config, Profile.NVIDIA_GPU).scan(), gpu_host) == (set(), {monitor.pid})


def test_the_tpu_profile_knows_no_agents(gpu_host: StandInGpuHost) -> None:
    """Agents are a GPU host's: under the TPU profile (its patterns pointed here) the same process is a
    holder like any other."""
    agent = gpu_host.hold("nvidia-persistenced", "nvidia0")
    config = dataclasses.replace(default_config(), devices=(gpu_host.pattern,))
    assert own(scanner_for(config, Profile.TPU).scan(), gpu_host) == ({agent.pid}, set())
