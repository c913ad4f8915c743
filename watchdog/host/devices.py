"""The device files a scan looks for: the patterns globbed, each node classified from sysfs (`core/devices.py`
has the rule), under an injectable sysfs root as /proc's is (tests build fixture trees for the classes this
machine cannot have: an accel node, a VFIO group of Google's devices).

Globbed and classified again on every scan (nodes and drivers come and go): a few readlinks per matched
node, nothing next to the scan's readlink per fd. Nothing here logs: what was matched and refused is in
`DeviceSet.matched`, said by whoever shows it (the daemon at start and on each change, the commands).
"""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass

from watchdog.core.devices import VFIO_GROUP_CLASS, MatchedDevice, SysfsFacts, judge

SYS = "/sys"


@dataclass(frozen=True)
class DeviceSet:
    """What one scan looks for: the watched paths, the device numbers of the watched char/block nodes, and
    the (st_dev, st_ino) of every watched file (so a lock file is found through another path too); and every
    path matched, refused ones included, with the verdict on each."""

    paths: frozenset[str] = frozenset()
    rdevs: frozenset[int] = frozenset()
    inodes: frozenset[tuple[int, int]] = frozenset()
    matched: tuple[MatchedDevice, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.paths)

    def matches_stat(self, st: os.stat_result) -> bool:
        if (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)) and st.st_rdev in self.rdevs:
            return True
        return (st.st_dev, st.st_ino) in self.inodes

    @property
    def nodes(self) -> tuple[MatchedDevice, ...]:
        """The watched device nodes (not the files): what `tpu_watchdog_devices` counts."""
        return tuple(m for m in self.matched if m.watched and m.is_node)


def _link_name(path: str) -> str | None:
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None


def _read_word(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read(64).strip() or None
    except OSError:
        return None


def sysfs_facts(number: tuple[int, int], block: bool, sys_root: str = SYS) -> SysfsFacts:
    """What /sys/dev/{char,block}/MAJ:MIN says: its class, its parent's driver and PCI vendor, and for a
    VFIO group the vendors of its IOMMU group's devices (/sys/kernel/iommu_groups/N/devices/*/vendor)."""
    entry = os.path.join(sys_root, "dev", "block" if block else "char", f"{number[0]}:{number[1]}")
    if not os.path.lexists(entry):
        return SysfsFacts(found=False)
    subsystem = _link_name(os.path.join(entry, "subsystem"))
    driver = _link_name(os.path.join(entry, "device", "driver"))
    vendor = _read_word(os.path.join(entry, "device", "vendor"))
    group: str | None = None
    vendors: tuple[str, ...] = ()
    if subsystem == VFIO_GROUP_CLASS:
        group = os.path.basename(os.path.realpath(entry)).removeprefix("noiommu-")
        members = os.path.join(
            glob.escape(sys_root), "kernel", "iommu_groups", group, "devices", "*", "vendor"
        )
        vendors = tuple(v for v in map(_read_word, sorted(glob.glob(members))) if v)
    return SysfsFacts(True, subsystem, driver, vendor, group, vendors)


def find_devices(
    patterns: Iterable[str],
    extra_paths: Iterable[str] = (),
    allowed: Iterable[tuple[int, int]] = (),
    sys_root: str = SYS,
) -> DeviceSet:
    """Glob the patterns now and judge what matched. A path that vanishes between the glob and the stat is
    left out, and so are directories (/dev/vfio/devices/ on newer kernels) and sockets or pipes."""
    candidates = {path for pattern in patterns for path in glob.glob(pattern)}
    candidates.update(extra_paths)
    allow = frozenset(allowed)
    paths: set[str] = set()
    rdevs: set[int] = set()
    inodes: set[tuple[int, int]] = set()
    matched: list[MatchedDevice] = []
    for path in sorted(candidates):
        try:
            st = os.stat(path)
        except OSError:
            continue
        block = stat.S_ISBLK(st.st_mode)
        number: tuple[int, int] | None
        if stat.S_ISCHR(st.st_mode) or block:
            node = (os.major(st.st_rdev), os.minor(st.st_rdev))
            number, facts = node, sysfs_facts(node, block, sys_root)
        elif stat.S_ISREG(st.st_mode):
            number, facts = None, SysfsFacts(found=False)
        else:
            continue
        device = MatchedDevice(path, number, block, facts, judge(number, facts, allow, path))
        matched.append(device)
        if not device.watched:
            continue
        paths.update((path, os.path.realpath(path)))  # a symlinked pattern is held under its real path
        inodes.add((st.st_dev, st.st_ino))
        if number is not None:
            rdevs.add(st.st_rdev)
    return DeviceSet(frozenset(paths), frozenset(rdevs), frozenset(inodes), tuple(matched))
