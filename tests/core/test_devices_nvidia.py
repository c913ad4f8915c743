"""core/devices.py's rule for NVIDIA nodes, pure: the driver's real numbers (195:N), the nodes every CUDA
process opens (refused by name or number, even when named in devices.allow_numbers), and a node whose
sysfs parent is an NVIDIA PCI device."""

from __future__ import annotations

import pytest

from watchdog.core.devices import SysfsFacts, Verdict, judge

NO_SYSFS = SysfsFacts(found=False)  # what the nvidia driver's nodes have: no /sys/dev/char/195:N entry


@pytest.mark.parametrize("minor", [0, 1, 7, 253])
def test_195_n_is_gpu_n(minor: int) -> None:
    judged = judge((195, minor), NO_SYSFS, path=f"/dev/nvidia{minor}")
    assert judged.verdict is Verdict.ACCELERATOR
    assert judged.why == f"NVIDIA GPU {minor} (the nvidia driver's major 195)"


@pytest.mark.parametrize(
    ("number", "path"), [((195, 255), "/dev/nvidiactl"), ((195, 254), "/dev/nvidia-modeset")]
)
def test_nvidiactl_and_modeset_are_refused_by_number(number: tuple[int, int], path: str) -> None:
    assert judge(number, NO_SYSFS, path="/dev/renamed").verdict is Verdict.REFUSED
    assert judge(number, NO_SYSFS, path=path).verdict is Verdict.REFUSED


@pytest.mark.parametrize(
    "path",
    ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-nvswitchctl", "/dev/nvidia-caps/nvidia-cap1"],
)
def test_the_shared_nodes_are_refused_by_name_even_when_allowed(path: str) -> None:
    """Their majors are dynamic (510, 234, ...): named, not numbered; allowing the number changes nothing."""
    judged = judge((510, 1), NO_SYSFS, allowed=[(510, 1)], path=path)
    assert judged.verdict is Verdict.REFUSED
    assert "every CUDA process" in judged.why


def test_an_nvidia_pci_device_is_a_gpu() -> None:
    facts = SysfsFacts(found=True, subsystem="nvidia-gpu", driver="nvidia", vendor="0x10de")
    assert judge((240, 0), facts, path="/dev/nvidia-new0").verdict is Verdict.ACCELERATOR


def test_another_major_named_like_a_gpu_is_not_identified_by_its_name() -> None:
    assert judge((60, 0), NO_SYSFS, path="/dev/nvidia0").verdict is Verdict.UNKNOWN
