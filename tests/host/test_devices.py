"""host/devices.py: real mknod'ed nodes judged against fixture sysfs trees, for the classes this machine
cannot have (an accel node of a Google PCI device, VFIO groups, the VFIO container, a block device); the
real /sys judges what it has (tests/host/test_holders_real.py holds those nodes with real children)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.workloads import HOLD_FLAGS, UniqueDevice
from watchdog.core.devices import GOOGLE_PCI_VENDOR, Verdict
from watchdog.host.devices import find_devices, sysfs_facts
from watchdog.host.holders import HolderScanner

NVIDIA = "0x10de"


@dataclass
class Sysfs:
    """A fixture sysfs tree laid out as the kernel's: /sys/dev/char/MAJ:MIN -> the device's directory, whose
    `subsystem` links to its class and `device` to its parent (a PCI device with `vendor` and `driver`)."""

    root: Path

    def _link(self, link: Path, target: Path) -> None:
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(target, link.parent))

    def pci(self, address: str, vendor: str, driver: str | None = None) -> Path:
        device = self.root / "devices" / "pci0000:00" / address
        device.mkdir(parents=True, exist_ok=True)
        (device / "vendor").write_text(vendor + "\n")
        if driver:
            (self.root / "bus" / "pci" / "drivers" / driver).mkdir(parents=True, exist_ok=True)
            self._link(device / "driver", self.root / "bus" / "pci" / "drivers" / driver)
        return device

    def node(
        self, number: tuple[int, int], cls: str, name: str, parent: Path | None = None, block: bool = False
    ) -> None:
        (self.root / "class" / cls).mkdir(parents=True, exist_ok=True)
        where = parent if parent is not None else self.root / "devices" / "virtual"
        device = where / cls / name
        device.mkdir(parents=True)
        self._link(device / "subsystem", self.root / "class" / cls)
        if parent is not None:
            self._link(device / "device", parent)
        kind = "block" if block else "char"
        self._link(self.root / "dev" / kind / f"{number[0]}:{number[1]}", device)

    def iommu_group(self, group: str, *members: Path) -> None:
        for member in members:
            self._link(self.root / "kernel" / "iommu_groups" / group / "devices" / member.name, member)


@pytest.fixture
def sysfs(tmp_path: Path) -> Sysfs:
    return Sysfs(tmp_path / "sys")


@pytest.fixture
def dev(tmp_path: Path) -> Path:
    directory = tmp_path / "dev"
    directory.mkdir()
    return directory


def mknod(path: Path, number: tuple[int, int], block: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, (stat.S_IFBLK if block else stat.S_IFCHR) | 0o600, os.makedev(*number))
    return path


def judged(
    dev: Path, sysfs: Sysfs, allowed: tuple[tuple[int, int], ...] = ()
) -> dict[str, tuple[Verdict, str]]:
    found = find_devices([f"{dev}/*", f"{dev}/vfio/*"], allowed=allowed, sys_root=str(sysfs.root))
    return {Path(m.path).name: (m.judgement.verdict, m.judgement.why) for m in found.matched}


def test_a_tpu_v4_accel_node_and_v5e_vfio_groups_are_accelerators(dev: Path, sysfs: Sysfs) -> None:
    """/dev/accel0: class accel, parent a Google PCI device; /dev/vfio/0: a VFIO group of Google devices;
    /dev/vfio/vfio, the container beside them, is refused."""
    chip = sysfs.pci("0000:00:04.0", GOOGLE_PCI_VENDOR, driver="asic")
    sysfs.node((121, 0), "accel", "accel0", parent=chip)
    tpu = sysfs.pci("0000:00:05.0", GOOGLE_PCI_VENDOR, driver="vfio-pci")
    sysfs.node((245, 0), "vfio", "0")
    sysfs.iommu_group("0", tpu)
    sysfs.node((10, 196), "misc", "vfio")
    mknod(dev / "accel0", (121, 0))
    mknod(dev / "vfio" / "0", (245, 0))
    mknod(dev / "vfio" / "vfio", (10, 196))
    assert judged(dev, sysfs) == {
        "accel0": (Verdict.ACCELERATOR, "a Google PCI device (vendor 0x1ae0): a TPU chip"),
        "0": (Verdict.ACCELERATOR, "VFIO group 0 of Google PCI devices (vendor 0x1ae0)"),
        "vfio": (Verdict.REFUSED, "the VFIO container, which every VFIO user opens, TPU or not"),
    }


def test_the_facts_are_read_from_the_links(sysfs: Sysfs) -> None:
    tpu = sysfs.pci("0000:00:05.0", GOOGLE_PCI_VENDOR, driver="vfio-pci")
    other = sysfs.pci("0000:00:06.0", GOOGLE_PCI_VENDOR)
    sysfs.node((245, 3), "vfio", "noiommu-7")
    sysfs.iommu_group("7", tpu, other)
    facts = sysfs_facts((245, 3), block=False, sys_root=str(sysfs.root))
    assert (facts.found, facts.subsystem, facts.group) == (True, "vfio", "7")
    assert facts.group_vendors == (GOOGLE_PCI_VENDOR, GOOGLE_PCI_VENDOR)
    chip = sysfs.pci("0000:00:04.0", GOOGLE_PCI_VENDOR, driver="asic")
    sysfs.node((121, 1), "accel", "accel1", parent=chip)
    facts = sysfs_facts((121, 1), block=False, sys_root=str(sysfs.root))
    assert (facts.subsystem, facts.driver, facts.vendor) == ("accel", "asic", GOOGLE_PCI_VENDOR)
    assert not sysfs_facts((121, 2), block=False, sys_root=str(sysfs.root)).found


def test_a_vfio_group_of_another_vendor_is_refused_and_an_unreadable_one_is_watched(
    dev: Path, sysfs: Sysfs
) -> None:
    gpu = sysfs.pci("0000:00:07.0", NVIDIA, driver="vfio-pci")
    sysfs.node((245, 1), "vfio", "1")
    sysfs.iommu_group("1", gpu)
    sysfs.node((245, 2), "vfio", "2")  # no /sys/kernel/iommu_groups/2
    mknod(dev / "vfio" / "1", (245, 1))
    mknod(dev / "vfio" / "2", (245, 2))
    assert judged(dev, sysfs) == {
        "1": (Verdict.REFUSED, f"VFIO group 1 of other PCI devices (vendor {NVIDIA}), not TPUs"),
        "2": (Verdict.UNKNOWN, "VFIO group 2: the PCI devices of its IOMMU group could not be read"),
    }


def test_the_kernel_s_own_classes_are_refused_even_with_a_google_parent(dev: Path, sysfs: Sysfs) -> None:
    chip = sysfs.pci("0000:00:04.0", GOOGLE_PCI_VENDOR)
    sysfs.node((13, 64), "input", "event0", parent=chip)
    sysfs.node((8, 0), "block", "sda", block=True)
    sysfs.node((10, 200), "misc", "tun")
    mknod(dev / "event0", (13, 64))
    mknod(dev / "sda", (8, 0), block=True)
    mknod(dev / "tun", (10, 200))
    assert judged(dev, sysfs) == {
        "event0": (Verdict.REFUSED, "class input: one of the kernel's own devices"),
        "sda": (Verdict.REFUSED, "class block: one of the kernel's own devices"),
        "tun": (Verdict.REFUSED, "class misc: one of the kernel's own devices"),
    }


def test_an_unknown_class_or_no_sysfs_entry_is_watched_and_a_number_opts_in(dev: Path, sysfs: Sysfs) -> None:
    card = sysfs.pci("0000:00:08.0", "0x1234", driver="oddaccel")
    sysfs.node((240, 0), "oddclass", "odd0", parent=card)
    mknod(dev / "odd0", (240, 0))
    mknod(dev / "nosysfs", (241, 0))
    mknod(dev / "full", (1, 7))
    sysfs.node((1, 7), "mem", "full")
    assert judged(dev, sysfs) == {
        "odd0": (
            Verdict.UNKNOWN,
            "class oddclass, driver oddaccel: neither a known accelerator nor one of the kernel's own",
        ),
        "nosysfs": (Verdict.UNKNOWN, "no sysfs entry: its class and driver are unknown"),
        "full": (Verdict.REFUSED, "class mem: one of the kernel's own devices"),
    }
    allowed = judged(dev, sysfs, allowed=((1, 7), (241, 0)))
    assert allowed["full"] == (Verdict.ALLOWED, "named in devices.allow_numbers (sysfs: class mem)")
    assert allowed["nosysfs"] == (Verdict.ALLOWED, "named in devices.allow_numbers")


@pytest.fixture
def holding() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait(timeout=30)
        assert proc.stdout is not None
        proc.stdout.close()


HOLD = """
import os, sys, signal
fd = os.open(sys.argv[1], int(sys.argv[2]))
print("ready", flush=True)
signal.pause()
"""


def hold(path: Path, started: list[subprocess.Popen[str]]) -> int:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path), str(HOLD_FLAGS)], stdout=subprocess.PIPE, text=True
    )
    started.append(proc)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc.pid


def test_a_real_holder_of_a_tpu_group_is_a_holder_and_one_of_the_container_alone_is_not(
    dev: Path, sysfs: Sysfs, holding: list[subprocess.Popen[str]]
) -> None:
    """The scan and the classification together, with real children (O_PATH: no driver behind these
    numbers here): the VFIO container alone never makes a holder."""
    tpu = sysfs.pci("0000:00:05.0", GOOGLE_PCI_VENDOR, driver="vfio-pci")
    sysfs.node((245, 0), "vfio", "0")
    sysfs.iommu_group("0", tpu)
    sysfs.node((10, 196), "misc", "vfio")
    group = hold(mknod(dev / "vfio" / "0", (245, 0)), holding)
    container = hold(mknod(dev / "vfio" / "vfio", (10, 196)), holding)
    result = HolderScanner(patterns=[f"{dev}/vfio/*"], sys_root=str(sysfs.root)).scan()
    held = {h.pid: h.devices for h in result.holders if h.pid in (group, container)}
    assert held == {group: (str(dev / "vfio" / "0"),)}


def test_a_unique_device_is_watched_as_unknown(tmp_path: Path) -> None:
    """The suite's `UniqueDevice` (a local-use major no driver has) has no sysfs entry on the real /sys:
    watched, with the warning real odd hardware gets, so the tests using it need no opt-in."""
    with UniqueDevice(tmp_path) as node:
        (matched,) = find_devices([str(node.path)]).matched
    assert matched.judgement.verdict is Verdict.UNKNOWN
    assert matched.watched
