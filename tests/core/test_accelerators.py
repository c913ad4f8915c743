"""The accelerator profile, the NVIDIA node rules (by the driver's real numbers) and the agent rule."""

from __future__ import annotations

import pytest

from watchdog.core.accelerators import (
    GPU_AGENTS,
    HostFacts,
    Profile,
    choose_profile,
    cross_check,
    is_agent,
    nvidia_gpu_index,
    nvidia_shared,
)


@pytest.mark.parametrize(
    ("configured", "facts", "profile"),
    [
        ("auto", HostFacts(machine_type="projects/123/machineTypes/a3-highgpu-8g"), Profile.NVIDIA_GPU),
        ("auto", HostFacts(machine_type="a4-highgpu-8g", tpu_nodes=True), Profile.NVIDIA_GPU),
        ("auto", HostFacts(machine_type="projects/1/machineTypes/ct5lp-hightpu-4t"), Profile.TPU),
        ("auto", HostFacts(tpu_accelerator_type="v4-8", gpu_nodes=True), Profile.TPU),
        ("auto", HostFacts(machine_type="n1-standard-8", gpu_nodes=True), Profile.NVIDIA_GPU),
        ("auto", HostFacts(gpu_nodes=True, tpu_nodes=True), Profile.TPU),
        ("auto", HostFacts(), Profile.TPU),
        ("tpu", HostFacts(machine_type="a3-megagpu-8g", gpu_nodes=True), Profile.TPU),
        ("nvidia-gpu", HostFacts(), Profile.NVIDIA_GPU),
    ],
)
def test_the_profile_of_a_host(configured: str, facts: HostFacts, profile: Profile) -> None:
    choice = choose_profile(configured, facts)
    assert choice.profile is profile
    assert choice.why


def test_the_machine_type_is_named_as_the_reason() -> None:
    why = choose_profile("auto", HostFacts(machine_type="projects/123/machineTypes/a3-highgpu-8g")).why
    assert why == "machine type a3-highgpu-8g"


def test_the_nvidia_drivers_numbers() -> None:
    """195:N is GPU N; 195:254 (nvidia-modeset) and 195:255 (nvidiactl) are everyone's; another major is
    none of the driver's GPUs."""
    assert [nvidia_gpu_index((195, n)) for n in (0, 7, 253)] == [0, 7, 253]
    assert nvidia_gpu_index((195, 254)) is None
    assert nvidia_gpu_index((195, 255)) is None
    assert nvidia_gpu_index((245, 0)) is None
    assert nvidia_shared("/dev/anything", (195, 255))
    assert nvidia_shared("/dev/anything", (195, 254))
    assert not nvidia_shared("/dev/nvidia0", (195, 0))


@pytest.mark.parametrize(
    "path",
    ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset",
     "/dev/nvidia-nvswitchctl", "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2"],
)  # fmt: skip
def test_the_nodes_every_cuda_process_opens_are_shared(path: str) -> None:
    assert nvidia_shared(path, (511, 0))  # their majors are dynamic: named, not numbered
    assert nvidia_shared(path, None)


@pytest.mark.parametrize("path", ["/dev/nvidia0", "/dev/nvidia12", "/dev/nvidia-something-new"])
def test_a_gpu_node_is_not_shared(path: str) -> None:
    assert not nvidia_shared(path, (195, 0))


def test_agents_by_executable_or_by_the_kernels_15_character_comm() -> None:
    agents = frozenset(GPU_AGENTS)
    assert is_agent("nvidia-persiste", "", agents)  # the comm of nvidia-persistenced, exe unreadable
    assert is_agent("whatever", "nvidia-persistenced", agents)
    assert is_agent("nv-hostengine", "/usr/bin/nv-hostengine", agents)
    assert is_agent("nvidia-smi", "nvidia-smi", agents)
    assert not is_agent("nvidia-persist", "python3", agents)  # a prefix of the comm is not the comm
    assert not is_agent("torchrun", "python3.10", agents)
    assert not is_agent("", "", agents)


def test_cross_check_says_who_each_side_misses() -> None:
    check = cross_check(scanned=[10, 11, 12], nvml=[11, 12, 13])
    assert (check.scan_only, check.nvml_only) == ((10,), (13,))
    first, second = check.sentences({10: "torchrun"})
    assert "10 (torchrun)" in first
    assert "NVML lists" in second
    assert "13" in second
    assert not cross_check([1, 2], [2, 1])
