"""What `tpu-watchdog holders` tells about each holder beyond the scan: its user, when it started, its
children. User and start time come from psutil, which turns each way a process can vanish or hide into one
exception and checks PID reuse itself.

Hand-written (docs/benchmarks.md, section psutil; CPU, medians of 5 runs): the scan (holders.py: psutil
lists no fds that are device nodes); the facts the scan reads anyway to decide who is excluded (name,
command line, uid, parent pid: psutil took 1.7x); the children (`Procfs.children`: psutil's took 1,800x on a
busy host), with psutil's as the fallback where the kernel keeps no lists of children.
Importing psutil costs ~48 ms of CPU, more than starting Python itself (~19 ms), so only this module
imports it, and only a command with holders to describe imports this module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import psutil

from watchdog.core.process import Holder, ProcessIdentity
from watchdog.host.procfs import PROC, Procfs, start_time

T = TypeVar("T")


@dataclass(frozen=True)
class HolderFacts:
    """Facts of one holder; None where psutil could not tell (not allowed to look, or it exited)."""

    user: str | None  # login name of the real uid; the uid as text when the password database has none
    create_time: float | None  # seconds since the epoch
    children: tuple[int, ...] | None  # PIDs of its direct children, ascending


def holder_facts(holders: Iterable[Holder], proc_root: str = PROC) -> dict[ProcessIdentity, HolderFacts]:
    """The facts of each holder that is still the process the scan saw; one that exited since (or whose PID
    now names another process) is left out. Reads `proc_root` through psutil's PROCFS_PATH, restored after:
    not for two threads at once, and one proc root per process (psutil 5.9 keeps the first boot time it
    reads, so start times read under a second root would be off)."""
    saved = psutil.PROCFS_PATH
    psutil.PROCFS_PATH = proc_root
    try:
        found = {holder.identity: _facts_of(holder.identity, proc_root) for holder in holders}
    finally:
        psutil.PROCFS_PATH = saved
    return {identity: facts for identity, facts in found.items() if facts is not None}


def _facts_of(identity: ProcessIdentity, proc_root: str) -> HolderFacts | None:
    try:
        proc = psutil.Process(identity.pid)
        now = start_time(identity.pid, proc_root)
    except (psutil.Error, PermissionError):
        return None
    if now != identity.start_time:
        return None  # the scanned process exited and its PID was reused before psutil looked
    with proc.oneshot():
        user = _ask(proc.username)
        created = _ask(proc.create_time)
    children = Procfs(proc_root).children(identity.pid)
    if children is None:
        found = _ask(proc.children)
        children = None if found is None else sorted(child.pid for child in found)
    if not proc.is_running():
        return None  # the process psutil opened is no longer there: what it told may be another's
    return HolderFacts(user, created, None if children is None else tuple(children))


def _ask(read: Callable[[], T]) -> T | None:
    try:
        return read()
    except psutil.Error:
        return None
