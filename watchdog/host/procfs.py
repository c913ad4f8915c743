"""Reading /proc under an injectable root: stat, status (uid, SIGTERM disposition), cmdline, cgroup, fd links.

The parsers are pure functions over the file contents, so tests feed them odd names and malformed lines;
`Procfs` is the thin edge that reads the files for the scan, `read_stat` the one read before a signal.
Processes come and go while we read them: in the scan, a process that has gone (ENOENT/ESRCH) raises
`ProcessGoneError`, one we may not look at (EACCES/EPERM, or anything else the kernel refuses) raises
`ProcessUnreadableError`. Callers count both and move on; neither is an error.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from functools import partial

from watchdog.core.vocabulary import SigtermDisposition

PROC = "/proc"
# Task flags (include/linux/sched.h), field 9 of /proc/PID/stat.
PF_EXITING = 0x00000004  # do_exit() has started: set before the process closes its files
PF_KTHREAD = 0x00200000  # a kernel thread: never a holder, never signalled
KTHREADD_PID = 2  # the parent of every kernel thread
_GONE_ERRNOS = frozenset({errno.ENOENT, errno.ESRCH})

# Cgroup path fragments an SRE recognises as "this is a container", most specific first.
_CONTAINER_MARKERS = ("kubepods", "docker", "containerd", "cri-containerd", "crio", "libpod", "lxc", "podman")


class ProcessGoneError(Exception):
    """The process exited (or its PID disappeared) while we were reading it."""


class ProcessUnreadableError(Exception):
    """The kernel refused to show us this process (EACCES/EPERM, a sandbox, a malformed file)."""


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/PID/stat the scanner needs."""

    pid: int
    name: str
    state: str
    ppid: int
    flags: int
    start_time: int  # field 22: clock ticks after boot; with the pid it names one process for good
    exit_code: int | None = None  # field 52: a zombie's wait status (0 unless we may see it); None: absent

    @property
    def is_zombie(self) -> bool:
        return self.state in ("Z", "X")

    @property
    def is_kernel_thread(self) -> bool:
        return bool(self.flags & PF_KTHREAD)

    @property
    def is_exiting(self) -> bool:
        return bool(self.flags & PF_EXITING)


def parse_stat(text: str) -> ProcStat:
    """Parse /proc/PID/stat. The name (field 2) may hold spaces and parentheses, so it runs from the first
    '(' to the LAST ')'; the numbered fields follow it."""
    open_paren = text.find("(")
    close_paren = text.rfind(")")
    if open_paren < 0 or close_paren < open_paren:
        raise ValueError(f"malformed /proc stat line (no '(name)'): {text[:80]!r}")
    fields = text[close_paren + 1 :].split()
    # fields[0] is field 3 (state); field N is fields[N - 3].
    if len(fields) < 20:
        raise ValueError(f"malformed /proc stat line ({len(fields) + 2} fields, need >= 22): {text[:80]!r}")
    try:
        return ProcStat(
            pid=int(text[:open_paren]),
            name=text[open_paren + 1 : close_paren],
            state=fields[0],
            ppid=int(fields[1]),
            flags=int(fields[6]),
            start_time=int(fields[19]),
            exit_code=int(fields[49]) if len(fields) > 49 else None,
        )
    except ValueError as exc:
        raise ValueError(f"malformed /proc stat line ({exc}): {text[:80]!r}") from None


def read_stat(pid: int, proc_root: str = PROC) -> ProcStat | None:
    """/proc/PID/stat parsed, or None if the process is gone (or the read is no stat line: the empty read
    of a process vanishing). One raw open and read: it runs before every signal. PermissionError
    (hidepid=) is raised: what not being allowed to look means is the caller's decision."""
    try:
        fd = os.open(f"{proc_root}/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    try:
        raw = os.read(fd, 4096)
    except ProcessLookupError:  # ESRCH: it went away between open and read
        return None
    finally:
        os.close(fd)
    try:
        return parse_stat(raw.decode("utf-8", errors="replace"))
    except ValueError:
        return None


def start_time(pid: int, proc_root: str = PROC) -> int | None:
    """Field 22 of /proc/PID/stat (clock ticks since boot), or None if the process is gone."""
    st = read_stat(pid, proc_root)
    return None if st is None else st.start_time


def parse_real_uid(status_text: str) -> int:
    """The real uid from /proc/PID/status (`Uid:` real, effective, saved, filesystem)."""
    for line in status_text.splitlines():
        if line.startswith("Uid:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1])
            break
    raise ValueError("no valid 'Uid:' line in /proc status")


_SIGTERM_BIT = 1 << (15 - 1)  # signal N is bit N-1 of the SigCgt/SigIgn masks; SIGTERM is 15 on Linux


def parse_sigterm(status_text: str) -> SigtermDisposition | None:
    """What SIGTERM does to the process now, from the hex masks of /proc/PID/status: `SigIgn` set is
    ignored, `SigCgt` set is caught (a handler), neither is the default action (death). None when either
    line is missing or not hex: the masks are per process (shared by its threads), so one read tells."""
    masks: dict[str, int] = {}
    for line in status_text.splitlines():
        name, _, value = line.partition(":")
        if name in ("SigIgn", "SigCgt"):
            try:
                masks[name] = int(value.strip(), 16)
            except ValueError:
                return None
    if len(masks) != 2:
        return None
    if masks["SigIgn"] & _SIGTERM_BIT:
        return SigtermDisposition.IGNORED
    if masks["SigCgt"] & _SIGTERM_BIT:
        return SigtermDisposition.CAUGHT
    return SigtermDisposition.DEFAULT


def parse_cmdline(raw: bytes) -> tuple[str, ...]:
    """/proc/PID/cmdline: arguments separated (and ended) by NUL. Empty for kernel threads and zombies."""
    if not raw:
        return ()
    text = raw.decode("utf-8", errors="replace")
    return tuple(text[:-1].split("\0") if text.endswith("\0") else text.split("\0"))


def pick_cgroup(text: str) -> str:
    """The one cgroup path that says where the process runs: a container path if any line has one
    (kubepods, docker, ...), else the cgroup v2 path, else the systemd (name=systemd) path, else the first
    non-root path, else "/". Lines are `hierarchy-id:controllers:path` (v2: `0::path`)."""
    paths: list[tuple[str, str]] = []  # (controllers, path)
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[2]:
            paths.append((parts[1], parts[2]))
    for marker in _CONTAINER_MARKERS:
        for _, path in paths:
            if marker in path:
                return path
    for controllers, path in paths:
        if controllers == "" and path != "/":
            return path
    for controllers, path in paths:
        if controllers == "name=systemd" and path != "/":
            return path
    for _, path in paths:
        if path != "/":
            return path
    return "/" if paths else ""


def _raise_for(exc: OSError, pid: int, what: str) -> ProcessGoneError | ProcessUnreadableError:
    if exc.errno in _GONE_ERRNOS:
        return ProcessGoneError(f"pid {pid} is gone ({what}: {exc.strerror})")
    return ProcessUnreadableError(f"pid {pid}: cannot read {what}: {exc.strerror or exc}")


NEW_PIDS_PROBE = 4096  # PIDs `pids_after` looks up one by one at most; more: /proc is listed instead


class Procfs:
    """Reads one /proc tree (the real one, or a fixture tree in tests)."""

    def __init__(self, root: str = PROC) -> None:
        self.root = root.rstrip("/") or "/"

    def pids(self) -> list[int]:
        """The PIDs of the processes (thread-group leaders) present now, ascending."""
        return sorted(int(name) for name in os.listdir(self.root) if name.isdigit())

    def last_pid(self) -> int | None:
        """The last PID this PID namespace allocated (/proc/sys/kernel/ns_last_pid); None when unknown (a
        fixture tree)."""
        try:
            with open(f"{self.root}/sys/kernel/ns_last_pid", "rb") as handle:
                return int(handle.read())
        except (OSError, ValueError):
            return None

    def pids_after(self, last: int) -> list[int] | None:
        """The processes (thread-group leaders) among the PIDs allocated since `last_pid()` said `last`, each
        looked up on its own: no listing of /proc, which takes milliseconds among 1,500 processes. PIDs are
        handed out in turn up to pid_max, then from the bottom again. None when that cannot tell: the
        counters unreadable, or more than NEW_PIDS_PROBE PIDs allocated since (a wrap that went all the way
        round is not seen here: the full scan that follows finds those)."""
        now = self.last_pid()
        if now is None:
            return None
        if now >= last:
            span = range(last + 1, now + 1)
            candidates: list[range] = [span]
        else:  # wrapped: up to pid_max, then from the bottom
            try:
                with open(f"{self.root}/sys/kernel/pid_max", "rb") as handle:
                    pid_max = int(handle.read())
            except (OSError, ValueError):
                return None
            candidates = [range(last + 1, pid_max), range(2, now + 1)]
        if sum(map(len, candidates)) > NEW_PIDS_PROBE:
            return None
        found = []
        for pid in (pid for span in candidates for pid in span):
            try:
                with open(f"{self.root}/{pid}/status", "rb") as handle:
                    status = handle.read(4096)
            except OSError:
                continue  # never was, or gone: what is left of a short-lived process
            start = status.find(b"\nTgid:")
            if start >= 0 and status[start + 6 :].split(maxsplit=1)[:1] == [str(pid).encode()]:
                found.append(pid)  # a thread's id names its process's /proc entry too: never taken for one
        return found

    def _read(self, pid: int, name: str) -> bytes:
        path = f"{self.root}/{pid}/{name}"
        try:
            with open(path, "rb") as handle:
                return handle.read()
        except OSError as exc:
            raise _raise_for(exc, pid, name) from None

    def stat(self, pid: int) -> ProcStat:
        raw = self._read(pid, "stat")
        if not raw:
            raise ProcessGoneError(f"pid {pid} is gone (empty stat)")
        try:
            return parse_stat(raw.decode("utf-8", errors="replace"))
        except ValueError as exc:
            raise ProcessUnreadableError(f"pid {pid}: {exc}") from None

    def real_uid(self, pid: int) -> int:
        return self.status(pid)[0]

    def status(self, pid: int) -> tuple[int, SigtermDisposition | None]:
        """The real uid and the SIGTERM disposition, from one read of /proc/PID/status."""
        text = self._read(pid, "status").decode("utf-8", errors="replace")
        try:
            return parse_real_uid(text), parse_sigterm(text)
        except ValueError as exc:
            raise ProcessUnreadableError(f"pid {pid}: {exc}") from None

    def cmdline(self, pid: int) -> tuple[str, ...]:
        return parse_cmdline(self._read(pid, "cmdline"))

    def exe_name(self, pid: int) -> str:
        """The base name of the executable (/proc/PID/exe); "" when it cannot be read (gone, refused, a
        kernel thread). A process cannot change it without exec'ing another file."""
        try:
            return os.path.basename(os.readlink(f"{self.root}/{pid}/exe")).removesuffix(" (deleted)")
        except OSError:
            return ""

    def cgroup(self, pid: int) -> str:
        return pick_cgroup(self.cgroup_text(pid))

    def cgroup_text(self, pid: int) -> str:
        """/proc/PID/cgroup as it is: `pick_cgroup` keeps one path, `workload_of_cgroup` reads them all."""
        return self._read(pid, "cgroup").decode("utf-8", errors="replace")

    def children(self, pid: int) -> list[int] | None:
        """PIDs of the direct children of `pid` (those of each of its threads), ascending; None when the
        kernel keeps no such lists (CONFIG_PROC_CHILDREN off; a fixture tree) or the process is gone. Reads
        its own few files only: ~30 us of CPU a holder on the busy host of `bench psutil`, where psutil's
        `children()`, which reads the stat of every process, took ~50 ms (1,800x, median of 5 runs)."""
        task_dir = f"{self.root}/{pid}/task"
        try:
            tids = os.listdir(task_dir)
        except OSError:
            return None
        found: set[int] = set()
        for tid in tids:
            try:
                with open(f"{task_dir}/{tid}/children", "rb") as handle:
                    found.update(int(word) for word in handle.read().split())
            except FileNotFoundError:
                if tid == str(pid):
                    return None  # no list even for the main thread: the kernel keeps none
                continue  # that thread exited meanwhile
            except OSError:
                return None
        return sorted(found)

    def fd_dir(self, pid: int) -> FdDir:
        """The open fd directory of `pid`; close it (or use it as a context manager) when done."""
        try:
            dir_fd = os.open(f"{self.root}/{pid}/fd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise _raise_for(exc, pid, "fd") from None
        return FdDir(pid, dir_fd)

    def fd_links(self, pid: int) -> list[tuple[str, str]]:
        """(fd name, link target) of each open fd of `pid`: see `FdDir.links`."""
        with self.fd_dir(pid) as fds:
            return fds.links()

    def mount_namespace(self, pid: int) -> str | None:
        """The mount namespace of `pid`: see `FdDir.mount_namespace`."""
        with self.fd_dir(pid) as fds:
            return fds.mount_namespace()


_FD_NAMES = [str(fd) for fd in range(4096)]


class FdDir:
    """One process's /proc/PID/fd, held open so links and stats go through one directory fd (readlinkat
    and fstatat on "N") instead of 40,000 full paths each looked up from /proc."""

    def __init__(self, pid: int, dir_fd: int) -> None:
        self.pid = pid
        self._dir_fd = dir_fd

    def __enter__(self) -> FdDir:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._dir_fd >= 0:
            os.close(self._dir_fd)
            self._dir_fd = -1

    def links(self) -> list[tuple[str, str]]:
        """(fd name, link target) of each open fd, e.g. ("3", "/dev/accel0"), ("4", "socket:[123]").
        A zombie or a kernel thread has none. An fd closed between the listing and its readlink is left out.

        Since Linux 6.2 the directory's st_size is the number of open fds; fds are allocated lowest-first,
        so they are usually 0..n-1 and can be read without listing the directory (a getdents that cost
        ~30 us per process on the benchmark VM). Any gap falls back to the listing."""
        dir_fd = self._dir_fd
        readlink = os.readlink
        try:
            count = os.fstat(dir_fd).st_size
            if 0 < count <= len(_FD_NAMES):
                names = _FD_NAMES[:count]
                try:
                    return list(zip(names, map(partial(readlink, dir_fd=dir_fd), names), strict=True))
                except FileNotFoundError:
                    pass  # a gap in the numbers, or an fd closed meanwhile: list the directory
            links = []
            for name in os.listdir(dir_fd):
                try:
                    links.append((name, readlink(name, dir_fd=dir_fd)))
                except FileNotFoundError:
                    continue
            return links
        except OSError as exc:
            raise _raise_for(exc, self.pid, "fd") from None

    def link(self, name: str) -> str | None:
        """Where fd `name` points (`links`' target), or None if it is not open (closed meanwhile)."""
        try:
            return os.readlink(name, dir_fd=self._dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _raise_for(exc, self.pid, f"fd {name}") from None

    def mount_namespace(self) -> str | None:
        """The process's mount namespace ("mnt:[4026531841]"): within one, a path names one file. None when
        unknown (no ns/ in a fixture tree, or not allowed). Read beside the open fd dir: the same process."""
        try:
            return os.readlink("../ns/mnt", dir_fd=self._dir_fd)
        except OSError:
            return None

    def stat(self, name: str) -> os.stat_result | None:
        """stat() of what fd `name` points at, following the link to the real inode whatever path the
        process sees it under; None if the fd was closed meanwhile (or a fixture link points nowhere)."""
        try:
            return os.stat(name, dir_fd=self._dir_fd)
        except OSError as exc:
            if exc.errno in _GONE_ERRNOS:
                return None
            raise _raise_for(exc, self.pid, f"fd {name}") from None
