"""Records describing a process on the TPU: who it is (identity) and what it holds (holder).

Shared by the scanner, the signaller, the drain engine and the state file. Pure data, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from watchdog.core.vocabulary import SigtermDisposition
from watchdog.core.workload import NO_WORKLOAD, Workload


@dataclass(frozen=True, order=True)
class ProcessIdentity:
    """A process, not just a PID: the start time (field 22 of /proc/PID/stat, in clock ticks since boot)
    tells a process from a later one that reused its PID."""

    pid: int
    start_time: int

    def __str__(self) -> str:
        return f"{self.pid}@{self.start_time}"


@dataclass(frozen=True)
class Holder:
    """A process holding at least one TPU device file open, with what an SRE needs to know who it is."""

    identity: ProcessIdentity
    name: str
    cmdline: tuple[str, ...]
    uid: int
    devices: tuple[str, ...]
    cgroup: str = ""
    ppid: int = 0
    sigterm: SigtermDisposition | None = None  # None: /proc did not say (a fixture tree, an odd kernel)
    workload: Workload = NO_WORKLOAD  # its systemd unit, container, pod (core/workload.py)
    fds: tuple[str, ...] = ()  # the fds it held `devices` by, at the scan: a re-check reads these first

    @property
    def pid(self) -> int:
        return self.identity.pid
