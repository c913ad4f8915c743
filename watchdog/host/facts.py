"""What `tpu-watchdog holders` tells about each holder beyond the scan: its user, when it started, its
children.

Read from /proc and the password database with the standard library: the user is the login name of the real
uid the scan read, the start time the kernel's boot second (/proc/stat `btime`) plus the start tick, the
same instant psutil's `create_time` gives, and the children the kernel's own lists (`Procfs.children`:
psutil's `children()`, which reads the stat of every process, took 1,800x on a busy host). The start tick
is read before and after, so a PID reused meanwhile is left out. psutil is the fallback where the kernel
keeps no lists of children (CONFIG_PROC_CHILDREN off, a fixture tree), imported only then: its import
costs ~40 ms, a quarter of a whole `holders` run on a busy host (`python -m bench holders`)."""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterable
from dataclasses import dataclass

from watchdog.core.process import Holder, ProcessIdentity
from watchdog.host.procfs import PROC, Procfs, start_time


@dataclass(frozen=True)
class HolderFacts:
    """Facts of one holder; None where they could not be read (not allowed to look, or it exited)."""

    user: str | None  # login name of the real uid; the uid as text when the password database has none
    create_time: float | None  # seconds since the epoch
    children: tuple[int, ...] | None  # PIDs of its direct children, ascending


def holder_facts(holders: Iterable[Holder], proc_root: str = PROC) -> dict[ProcessIdentity, HolderFacts]:
    """The facts of each holder that is still the process the scan saw; one that exited since (or whose PID
    now names another process) is left out."""
    boot = _boot_time(proc_root)
    ticks = os.sysconf("SC_CLK_TCK")
    procfs = Procfs(proc_root)
    found: dict[ProcessIdentity, HolderFacts] = {}
    for holder in holders:
        identity = holder.identity
        if start_time(identity.pid, proc_root) != identity.start_time:
            continue  # exited since the scan, or its PID now names another process
        children = procfs.children(identity.pid)
        if children is None:
            children = _children_by_psutil(identity.pid, proc_root)
        if start_time(identity.pid, proc_root) != identity.start_time:
            continue  # gone while it was looked at: its children may be another's
        created = None if boot is None else boot + identity.start_time / ticks
        found[identity] = HolderFacts(
            _user(holder.uid), created, None if children is None else tuple(children)
        )
    return found


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _boot_time(proc_root: str) -> float | None:
    """The kernel's boot time, seconds since the epoch (/proc/stat `btime`), as psutil reads it."""
    try:
        with open(f"{proc_root}/stat", "rb") as handle:
            for line in handle:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _children_by_psutil(pid: int, proc_root: str) -> list[int] | None:
    """psutil's `children()` (the stat of every process), through its PROCFS_PATH, restored after: not for
    two threads at once."""
    import psutil  # only here: see the module's docstring

    saved = psutil.PROCFS_PATH
    psutil.PROCFS_PATH = proc_root
    try:
        return sorted(child.pid for child in psutil.Process(pid).children())
    except psutil.Error:
        return None
    finally:
        psutil.PROCFS_PATH = saved
