"""Which matched device nodes are TPU devices: the rule, pure, from what sysfs says about each node.

A broad pattern (or a typo such as "/dev/*") must never make journald (/dev/kmsg) or gcsfuse (/dev/fuse) a
"TPU holder": a drain would SIGTERM them. So a node is judged by its kernel class (the `subsystem` link of
/sys/dev/char/MAJ:MIN) and its PCI device, never by a list of numbers: the kernel's own classes (mem, tty,
misc, input, block, ...) are refused; a node whose PCI device is Google's (vendor 0x1ae0: every TPU chip,
v2 to tpu7x) and the accel class are accepted; a VFIO group (/dev/vfio/N, class vfio) is a TPU when the PCI
devices of its IOMMU group are Google's (tpu-info and Ray identify TPU groups this way). Anything else is
accepted with a warning: a missed TPU is worse than a warning. docs/devices.md says how each fact is known.

Two exceptions are by number: nodes nearly every process holds (/dev/null, /dev/zero, /dev/urandom,
terminals and pseudo-terminals, which have no sysfs entry of their own) are refused whatever else is said,
and `devices.allow_numbers` accepts the numbers an operator (or a test) names.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from watchdog.core.accelerators import (
    NVIDIA_DRIVER,
    NVIDIA_MAJOR,
    NVIDIA_PCI_VENDOR,
    nvidia_gpu_index,
    nvidia_shared,
)

GOOGLE_PCI_VENDOR = "0x1ae0"  # /sys/bus/pci/devices/*/vendor of every TPU chip (JAX, tpu-info, Ray read it)
VFIO_CONTAINER = (10, 196)  # /dev/vfio/vfio: misc, opened by every VFIO user, TPU or not
VFIO_GROUP_CLASS = "vfio"  # /dev/vfio/N: drivers/vfio/group.c names the device after its IOMMU group
# The accel class: Google's accelerator class (TPU v2-v4, /dev/accelN) and the kernel's DRM accel subsystem.
ACCELERATOR_CLASSES = frozenset({"accel"})
# Classes of the kernel's own devices: memory and randomness, consoles and terminals, misc (fuse, kmsg is
# mem, tun, kvm, the VFIO container), input, sound, storage, clocks, TPM chips, CPU registers.
KERNEL_CLASSES = frozenset({
    "mem", "tty", "vc", "vtconsole", "misc", "input", "hidraw", "sound", "block", "bsg", "scsi_generic",
    "nvme", "nvme-generic", "rtc", "ptp", "pps", "watchdog", "tpm", "tpmrm", "msr", "cpuid", "dma_heap",
    "drm_dp_aux_dev", "mei", "ppp", "raw", "usbmon", "usb_device", "usbmisc", "gpio", "zram-control",
})  # fmt: skip
_MEM, _NULL, _ZERO, _URANDOM = 1, 3, 5, 9
_TTY_MAJORS = (4, 5)  # virtual consoles, serial ports, /dev/tty, /dev/console, /dev/ptmx
_PTS_MAJORS = range(136, 144)  # Unix98 pseudo-terminal slaves: devpts nodes have no sysfs entry


def everyone_holds(major: int, minor: int) -> bool:
    """/dev/null, /dev/zero, /dev/urandom and every terminal: a pattern matching one of these would make
    nearly every process a TPU holder, so no rule and no configuration accepts them."""
    mem = major == _MEM and minor in (_NULL, _ZERO, _URANDOM)
    return mem or major in _TTY_MAJORS or major in _PTS_MAJORS


def parse_number(text: str) -> tuple[int, int]:
    """ "MAJ:MIN" (as /sys/dev/char names a node, and `ls -l` shows it: "240, 0") -> (major, minor);
    ValueError naming what is wrong."""
    major, colon, minor = text.strip().partition(":")
    if not colon or not all(part.isascii() and part.isdigit() for part in (major, minor)):
        raise ValueError(f'{text!r} is not a device number MAJOR:MINOR, e.g. "240:0"')
    number = int(major), int(minor)
    if number[0] >= 1 << 12 or number[1] >= 1 << 20:
        raise ValueError(f"{text!r} is out of range (major < 4096, minor < 1048576)")
    return number


def number_text(number: tuple[int, int]) -> str:
    return f"{number[0]}:{number[1]}"


@dataclass(frozen=True)
class SysfsFacts:
    """What sysfs says about one node; `found` False: no /sys/dev/{char,block}/MAJ:MIN entry at all."""

    found: bool
    subsystem: str | None = None  # the class: basename of the entry's `subsystem` link
    driver: str | None = None  # basename of `device/driver`: the driver bound to its parent device
    vendor: str | None = None  # `device/vendor`: its parent's PCI vendor, when the parent is a PCI device
    group: str | None = None  # a VFIO group: its IOMMU group number
    group_vendors: tuple[str, ...] = ()  # the PCI vendors of that IOMMU group's devices


class Verdict(enum.Enum):
    """What a matched path is to the scan; the first three are watched (their holders are drained)."""

    ACCELERATOR = "accelerator"  # identified: a TPU (Google's PCI device) or the accel class
    ALLOWED = "allowed"  # devices.allow_numbers names it
    UNKNOWN = "unknown"  # neither known as an accelerator nor as the kernel's own: watched, with a warning
    FILE = "file"  # a regular file (devices.extra_paths: libtpu's lock file)
    REFUSED = "refused"  # the kernel's own, or everyone's: never watched

    @property
    def watched(self) -> bool:
        return self is not Verdict.REFUSED


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    why: str


def judge(
    number: tuple[int, int] | None,
    facts: SysfsFacts,
    allowed: Collection[tuple[int, int]] = (),
    path: str = "",
) -> Judgement:
    """The rule for one matched node (`number` None: a regular file) at `path`. Refusals come first: a node
    of the kernel's own class is never a TPU, whatever its parent device. An NVIDIA GPU's node (195:N) has
    no sysfs entry of its own (the driver makes none): its number names it (core/accelerators.py)."""
    if number is None:
        return Judgement(Verdict.FILE, "a regular file (holders of it are drained too)")
    if everyone_holds(*number):
        return Judgement(Verdict.REFUSED, "nearly every process holds it (/dev/null, /dev/zero, a terminal)")
    if nvidia_shared(path, number):
        return Judgement(Verdict.REFUSED, "an NVIDIA node every CUDA process opens, whichever GPU it uses")
    if number in allowed:
        said = f" (sysfs: class {facts.subsystem})" if facts.subsystem else ""
        return Judgement(Verdict.ALLOWED, f"named in devices.allow_numbers{said}")
    gpu = nvidia_gpu_index(number)
    if gpu is not None:
        return Judgement(Verdict.ACCELERATOR, f"NVIDIA GPU {gpu} (the nvidia driver's major {NVIDIA_MAJOR})")
    if not facts.found:
        return Judgement(Verdict.UNKNOWN, "no sysfs entry: its class and driver are unknown")
    if number == VFIO_CONTAINER:
        return Judgement(Verdict.REFUSED, "the VFIO container, which every VFIO user opens, TPU or not")
    if facts.subsystem in KERNEL_CLASSES:
        return Judgement(Verdict.REFUSED, f"class {facts.subsystem}: one of the kernel's own devices")
    if facts.vendor == NVIDIA_PCI_VENDOR or facts.driver == NVIDIA_DRIVER:
        return Judgement(Verdict.ACCELERATOR, "an NVIDIA PCI device (vendor 0x10de, driver nvidia): a GPU")
    if facts.vendor == GOOGLE_PCI_VENDOR:
        return Judgement(Verdict.ACCELERATOR, f"a Google PCI device (vendor {GOOGLE_PCI_VENDOR}): a TPU chip")
    if facts.subsystem == VFIO_GROUP_CLASS:
        return _vfio_group(facts)
    if facts.subsystem in ACCELERATOR_CLASSES:
        return Judgement(Verdict.ACCELERATOR, f"class {facts.subsystem}: an accelerator")
    return Judgement(
        Verdict.UNKNOWN,
        f"class {facts.subsystem or 'none'}, driver {facts.driver or 'none'}: neither a known accelerator "
        "nor one of the kernel's own",
    )


def _vfio_group(facts: SysfsFacts) -> Judgement:
    group = f"VFIO group {facts.group}"
    if GOOGLE_PCI_VENDOR in facts.group_vendors:
        return Judgement(Verdict.ACCELERATOR, f"{group} of Google PCI devices (vendor {GOOGLE_PCI_VENDOR})")
    if facts.group_vendors:
        vendors = ", ".join(sorted(set(facts.group_vendors)))
        return Judgement(Verdict.REFUSED, f"{group} of other PCI devices (vendor {vendors}), not TPUs")
    return Judgement(Verdict.UNKNOWN, f"{group}: the PCI devices of its IOMMU group could not be read")


@dataclass(frozen=True)
class MatchedDevice:
    """One path a device pattern (or devices.extra_paths) matched, and what the rule made of it."""

    path: str
    number: tuple[int, int] | None  # None: a regular file
    block: bool
    facts: SysfsFacts
    judgement: Judgement

    @property
    def watched(self) -> bool:
        return self.judgement.verdict.watched

    @property
    def is_node(self) -> bool:
        return self.number is not None

    def describe(self) -> str:
        """One line: `/dev/vfio/0 (245:0): VFIO group 0 of Google PCI devices ...` (the why names the class
        where the class decided)."""
        if self.number is None:
            return f"{self.path}: {self.judgement.why}"
        kind = "block " if self.block else ""
        return f"{self.path} ({kind}{number_text(self.number)}): {self.judgement.why}"

    def to_dict(self) -> dict[str, object]:
        """/status `devices`: the facts, the verdict and why."""
        return {
            "path": self.path,
            "number": None if self.number is None else number_text(self.number),
            "type": "file" if self.number is None else "block" if self.block else "char",
            "class": self.facts.subsystem,
            "driver": self.facts.driver,
            "verdict": self.judgement.verdict.value,
            "watched": self.watched,
            "why": self.judgement.why,
        }


def notes(matched: Iterable[MatchedDevice]) -> list[tuple[bool, str]]:
    """What an operator must hear about the matched paths: (a warning?, the sentence) for each refused,
    unidentified or allowed-by-number one; the identified and the files need no word. The daemon logs
    these at start and on each change; `holders`, `drill` and `readiness` print them."""
    said: list[tuple[bool, str]] = []
    for device in matched:
        verdict = device.judgement.verdict
        if verdict is Verdict.REFUSED:
            said.append((True, f"not a TPU device, never watched: {device.describe()}"))
        elif verdict is Verdict.UNKNOWN and device.number is not None:
            said.append((True, (
                f"watched, but not identified as a TPU device: {device.describe()}; if it is none, narrow "
                f'devices.patterns; if it is, add "{number_text(device.number)}" to devices.allow_numbers'
            )))  # fmt: skip
        elif verdict is Verdict.ALLOWED:
            said.append((False, f"watched by number: {device.describe()}"))
    return said


def notes_text(matched: Iterable[MatchedDevice]) -> str:
    """`notes` as lines for a command's stderr ("warning: ..." / "note: ..."); "" when there is none."""
    return "".join(f"{'warning' if warn else 'note'}: {sentence}\n" for warn, sentence in notes(matched))
