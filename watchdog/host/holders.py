"""Which processes hold the TPU device files open: the scan, and who is never reported (which files are
TPU devices: host/devices.py).

A process holds the TPU if one of its fds points at a matched device node, found by the path it sees
(`/proc/PID/fd/N` -> `/dev/accel0`) or, when the process sees the node under another path (a container's own
/dev, a deleted node), by device number: stat() through the fd reaches the real inode. Stat-ing every fd is
what makes `fuser` slow, so only fd targets that are paths (not sockets, pipes or anon inodes) and did not
already match by path are stat-ed, and each (mount namespace, path) only once per scan. What remains is one
readlink per fd: that is the cost of a scan (docs/benchmarks.md, section holders).

Never reported: PID 1, the scanner's own process and its parent, kernel threads, and the configured
excludes. Processes that vanish, refuse us, or are zombies are counted in the `ScanResult`, never raised.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from watchdog.core.accelerators import Profile, gpu_agents, is_agent
from watchdog.core.devices import MatchedDevice, parse_number
from watchdog.core.process import Holder, ProcessIdentity
from watchdog.host.devices import SYS, DeviceSet, find_devices
from watchdog.host.procfs import KTHREADD_PID, ProcessGoneError, ProcessUnreadableError, Procfs, pick_cgroup
from watchdog.host.workload import WorkloadReader

DEFAULT_PATTERNS = ("/dev/accel*", "/dev/vfio/*")
# mount namespace -> fd target path -> whether it is one of the devices, remembered for one scan.
SeenPaths = dict[str, dict[str, bool]]
_PIDS_PER_WORKER = 200  # below this a thread costs more than it saves
LIBTPU_LOCKFILE = "/tmp/libtpu_lockfile"  # noqa: S108 - libtpu's fixed lock path, named here to be matched


@dataclass(frozen=True)
class Excludes:
    """Processes never reported (so never signalled): by PID, by name (the /proc comm name or the base
    name of argv[0]) or by real uid; and the GPU agents (`core/accelerators.py`: by executable or comm
    name), which are reported apart (`ScanResult.agents`) and never signalled either."""

    pids: frozenset[int] = frozenset()
    names: frozenset[str] = frozenset()
    uids: frozenset[int] = frozenset()
    agents: frozenset[str] = frozenset()


class ScanSettings(Protocol):
    """What `scanner_for` reads. The configuration (`Config`) has these: named here so that host/ need not
    import the configuration (and `holders` starts without it)."""

    @property
    def devices(self) -> Iterable[str]: ...
    @property
    def nvidia_devices(self) -> Iterable[str]: ...
    @property
    def gpu_agents(self) -> Iterable[str]: ...
    @property
    def extra_paths(self) -> Iterable[str]: ...
    @property
    def allow_numbers(self) -> Iterable[str]: ...
    @property
    def exclude_pids(self) -> Iterable[int]: ...
    @property
    def exclude_names(self) -> Iterable[str]: ...
    @property
    def exclude_uids(self) -> Iterable[int]: ...


@dataclass(frozen=True)
class ScanResult:
    """One scan: who holds the devices, which device paths matched, and what could not be looked at."""

    holders: tuple[Holder, ...]
    devices: tuple[str, ...]  # the watched paths
    scanned: int = 0  # processes whose fds were read
    vanished: int = 0  # exited while we read them
    unreadable: int = 0  # the kernel refused (EACCES/EPERM)
    zombies: int = 0  # exited, not yet reaped: no fds, nothing to signal
    excluded: int = 0  # holders left out: kernel threads and the excludes (PID 1, self, parent: not read)
    matched: tuple[MatchedDevice, ...] = ()  # every path the patterns matched, refused ones too, judged
    pids: frozenset[int] = frozenset()  # the processes there were to look at (`newcomers` skips them)
    last_pid: int | None = None  # the namespace's last PID before they were listed (`newcomers` starts there)
    agents: tuple[Holder, ...] = ()  # GPU agents holding a device: left alone, never signalled


@dataclass
class _Tally:
    """What one worker found; summed into the ScanResult."""

    holders: list[Holder] = field(default_factory=list)
    agents: list[Holder] = field(default_factory=list)
    scanned: int = 0
    vanished: int = 0
    unreadable: int = 0
    zombies: int = 0
    excluded: int = 0
    failure: BaseException | None = None


class HolderScanner:
    """Finds the processes holding the TPU device files, reading /proc under `proc_root`."""

    def __init__(
        self,
        patterns: Iterable[str] = DEFAULT_PATTERNS,
        extra_paths: Iterable[str] = (),
        excludes: Excludes | None = None,
        proc_root: str = "/proc",
        workers: int = 1,
        node_root: str | None = None,
        allow_numbers: Iterable[tuple[int, int]] = (),
        sys_root: str = SYS,
    ) -> None:
        self.patterns = tuple(patterns)
        self.extra_paths = tuple(extra_paths)
        self.excludes = excludes if excludes is not None else Excludes()
        self.procfs = Procfs(proc_root)
        self.workers = workers
        self.workloads = WorkloadReader(proc_root, node_root)  # node_root: the kubelet's files (None: found)
        self.allow_numbers = tuple(allow_numbers)
        self.sys_root = sys_root

    def devices(self) -> DeviceSet:
        """The patterns' nodes now, each judged by `core/devices.py`'s rule (the one place: the daemon,
        `holders`, `drill` and `readiness` all scan through this)."""
        return find_devices(self.patterns, self.extra_paths, self.allow_numbers, self.sys_root)

    def _devices_held(self, pid: int, devices: DeviceSet, seen: SeenPaths) -> list[tuple[str, str]] | None:
        """The fds by which `pid` holds a device, each (fd name, the device's path as the process sees it),
        or None if it has no fds at all (a zombie or a kernel thread); raises
        ProcessGoneError/ProcessUnreadableError.

        `seen` remembers, for one scan, whether (mount namespace, path) is a device we look for: most fds
        of most processes point at the same few files (/dev/null, logs), stat-ed once instead of per fd.
        Deleted files are never remembered: two of them can share a path."""
        paths = devices.paths
        with self.procfs.fd_dir(pid) as fds:
            links = fds.links()
            if not links:
                return None
            held = [(name, target) for name, target in links if target in paths]
            # Sockets, pipes and anon inodes ("socket:[12]") are never device nodes: only paths get a stat.
            to_stat = [(name, target) for name, target in links if target[:1] == "/" and target not in paths]
            if not to_stat:
                return held
            namespace = fds.mount_namespace()
            known = seen.setdefault(namespace, {}) if namespace is not None else {}
            for name, target in to_stat:
                match = known.get(target)
                if match is None:
                    st = fds.stat(name)
                    if st is None:
                        continue  # closed meanwhile
                    match = devices.matches_stat(st)
                    if not target.endswith(" (deleted)"):
                        known[target] = match
                if match:
                    held.append((name, target))
        return held

    def _still_held(self, pid: int, fds: Sequence[str], devices: DeviceSet) -> list[tuple[str, str]]:
        """Those of `fds` (an earlier scan's) by which `pid` still holds a device: one readlink each (and a
        stat for a path that is not a watched node's), whatever else the process has open."""
        paths, held = devices.paths, list[tuple[str, str]]()
        if not fds:
            return held
        with self.procfs.fd_dir(pid) as open_fds:
            for name in fds:
                target = open_fds.link(name)
                if target is None:
                    continue
                if target in paths:
                    held.append((name, target))
                elif target[:1] == "/":
                    st = open_fds.stat(name)
                    if st is not None and devices.matches_stat(st):
                        held.append((name, target))
        return held

    def scan(self) -> ScanResult:
        """One look at every process. The cost is one readlink per fd (~5 us each on a 2-vCPU VM, 40,000
        fds on a busy host): everything else is noise next to it. `workers` > 1 shares the PIDs among
        threads (readlink releases the GIL); on the 2-vCPU benchmark VM that bought no time and cost 40%
        more CPU, so the default is 1 - measure (`python -m bench holders`) before raising it.

        Hand-written because psutil cannot do it (`python -m bench psutil`, medians of 5 runs): it lists no
        device-node fds (`open_files()` keeps regular files: it found none of the 4 holders, at 2.8x our
        CPU), and its nearest scan, its process list plus a readlink of every fd, took the same CPU (1.01x)
        while matching by path only: the readlinks are the cost either way."""
        devices = self.devices()
        if not devices:
            return ScanResult(holders=(), devices=(), matched=devices.matched)
        never = {1, os.getpid(), os.getppid(), *self.excludes.pids}
        last_pid = self.procfs.last_pid()  # before the listing: a process started during it is newer
        pids = [pid for pid in self.procfs.pids() if pid not in never]
        seen: SeenPaths = {}
        workers = max(1, min(self.workers, len(pids) // _PIDS_PER_WORKER))
        tallies = [_Tally() for _ in range(workers)]
        if workers == 1:
            self._scan_pids(pids, devices, seen, tallies[0])
        else:
            import threading  # only when asked for: `tpu-watchdog holders` starts without it

            threads = [
                threading.Thread(
                    target=self._scan_pids,
                    args=(pids[i::workers], devices, seen, tally),
                    name=f"holder-scan-{i}",
                    daemon=True,
                )
                for i, tally in enumerate(tallies)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        for tally in tallies:
            if tally.failure is not None:
                raise tally.failure
        return ScanResult(
            holders=tuple(sorted((h for t in tallies for h in t.holders), key=lambda h: h.pid)),
            devices=tuple(sorted(devices.paths)),
            scanned=sum(t.scanned for t in tallies),
            vanished=sum(t.vanished for t in tallies),
            unreadable=sum(t.unreadable for t in tallies),
            zombies=sum(t.zombies for t in tallies),
            excluded=sum(t.excluded for t in tallies),
            matched=devices.matched,
            pids=frozenset(pids),
            last_pid=last_pid,
            agents=tuple(sorted((h for t in tallies for h in t.agents), key=lambda h: h.pid)),
        )

    def newcomers(self, known: Collection[int], after: int | None = None) -> list[Holder]:
        """The holders among the processes not in `known` (the PIDs of an earlier scan: the warm index's):
        a job started since that scan is found without reading every fd on the host. A PID reused since
        then is not new here; the full scan that follows a drain's first wave finds it. `after`: that
        scan's `last_pid`; then only the PIDs allocated since are looked up (`Procfs.pids_after`), else
        every PID listed."""
        devices = self.devices()
        never = {1, os.getpid(), os.getppid(), *self.excludes.pids}
        tally = _Tally()
        if devices:
            since = self.procfs.pids_after(after) if after is not None else None
            listed = self.procfs.pids() if since is None else since
            new = [pid for pid in listed if pid not in known and pid not in never]
            self._scan_pids(new, devices, {}, tally)
        if tally.failure is not None:
            raise tally.failure
        return tally.holders

    def recheck(self, holders: Iterable[Holder]) -> list[Holder]:
        """Those of `holders` (an earlier scan: the warm index) that are still the same process and still
        hold a device, read from their own /proc entries only: a few reads each, whatever the host's size.
        The start time is read before and after the fd links, so a PID reused meanwhile never passes; the
        SIGTERM disposition is read again (the drain keeps it as seen before its signal)."""
        devices = self.devices()
        if not devices:
            return []
        never = {1, os.getpid(), os.getppid(), *self.excludes.pids}
        still: list[Holder] = []
        for holder in holders:
            pid = holder.pid
            if pid in never:
                continue
            try:
                before = self.procfs.stat(pid)
                if before.start_time != holder.identity.start_time or before.is_zombie:
                    continue
                # The fds it held them by first (a few reads, however many fds it has), then all of them.
                held = self._still_held(pid, holder.fds, devices) or self._devices_held(pid, devices, {})
                if not held or self.procfs.stat(pid).start_time != holder.identity.start_time:
                    continue
            except (ProcessGoneError, ProcessUnreadableError):
                continue
            try:  # its SIGTERM now, not at the index's scan: a job installs its handler as it starts
                sigterm = self.procfs.status(pid)[1]
            except (ProcessGoneError, ProcessUnreadableError):
                sigterm = None  # not known, rather than what it was
            paths, fds = _held(held)
            still.append(dataclasses.replace(holder, devices=paths, fds=fds, sigterm=sigterm))
        return still

    def _scan_pids(self, pids: list[int], devices: DeviceSet, seen: SeenPaths, tally: _Tally) -> None:
        try:
            for pid in pids:
                self._scan_pid(pid, devices, seen, tally)
        except BaseException as exc:  # noqa: BLE001 - a bug in a worker thread is re-raised by scan()
            tally.failure = exc

    def _scan_pid(self, pid: int, devices: DeviceSet, seen: SeenPaths, tally: _Tally) -> None:
        try:
            held = self._devices_held(pid, devices, seen)
            tally.scanned += 1
            if held is None:
                tally.zombies += self.procfs.stat(pid).is_zombie
                return
            if not held:
                return
            holder = self._describe(pid, devices)
        except ProcessGoneError:
            tally.vanished += 1
            return
        except ProcessUnreadableError:
            tally.unreadable += 1
            return
        if holder is None:
            tally.excluded += 1
        elif self._is_agent(holder):
            tally.agents.append(holder)
        elif holder.devices:  # empty: it closed them (or exited) between the two reads
            tally.holders.append(holder)

    def _is_agent(self, holder: Holder) -> bool:
        agents = self.excludes.agents
        return bool(agents) and is_agent(holder.name, self.procfs.exe_name(holder.pid), agents)

    def _describe(self, pid: int, devices: DeviceSet) -> Holder | None:
        """Who `pid` is, or None if it must never be reported. Identity (start time) is read first and the
        fds re-read after it, so a PID reused between the two reads cannot pass as the holder."""
        procfs = self.procfs
        st = procfs.stat(pid)
        cmdline = procfs.cmdline(pid)
        if st.is_kernel_thread or (not cmdline and st.ppid == KTHREADD_PID) or st.is_zombie:
            return None
        uid, sigterm = procfs.status(pid)
        if uid in self.excludes.uids or st.name in self.excludes.names:
            return None
        if cmdline and os.path.basename(cmdline[0]) in self.excludes.names:
            return None
        held = self._devices_held(pid, devices, {}) or []  # closed them (or exited) since the first read
        paths, fds = _held(held)
        cgroup = procfs.cgroup_text(pid)
        return Holder(
            identity=ProcessIdentity(pid, st.start_time),
            name=st.name,
            cmdline=cmdline,
            uid=uid,
            devices=paths,
            cgroup=pick_cgroup(cgroup),
            ppid=st.ppid,
            sigterm=sigterm,
            workload=self.workloads.read(pid, cgroup),
            fds=fds,
        )


def _held(held: Sequence[tuple[str, str]]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A holder's `devices` (each path once, sorted) and `fds` (in fd order) from what it holds them by."""
    devices = tuple(sorted({target for _, target in held}))
    return devices, tuple(sorted({name for name, _ in held}, key=lambda name: (len(name), name)))


def nodes_present(patterns: Iterable[str]) -> bool:
    """Whether any path matches one of `patterns` now: what a profile is chosen by when the metadata
    server is not asked (or does not say)."""
    return any(glob.glob(pattern) for pattern in patterns)


def scanner_for(config: ScanSettings, profile: Profile = Profile.TPU, sys_root: str = SYS) -> HolderScanner:
    """The scanner the configuration describes for this host's accelerator profile (its device patterns,
    on a GPU host its agents; extra paths, allowed numbers, excludes): daemon, drill, readiness."""
    gpu = profile is Profile.NVIDIA_GPU
    return HolderScanner(
        patterns=config.nvidia_devices if gpu else config.devices,
        extra_paths=config.extra_paths,
        allow_numbers=[parse_number(text) for text in config.allow_numbers],
        sys_root=sys_root,
        excludes=Excludes(
            pids=frozenset(config.exclude_pids),
            names=frozenset(config.exclude_names),
            uids=frozenset(config.exclude_uids),
            agents=gpu_agents(config.gpu_agents) if gpu else frozenset(),
        ),
    )
