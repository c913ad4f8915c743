"""How fast `tpu-watchdog holders --json` finds the TPU holders on a busy host, against the least any fd scan
can do (a Python process that reads every fd link and keeps nothing), and `fuser` and `lsof -t`.

The host is made busy on purpose: a hundred parent processes each fork into small sleepers, every one
holding 26 fds of the usual kinds (/dev/null, regular files, pipes, sockets, an epoll and an eventfd), ~1,600
processes and ~41,000 fds in all; a few more hold mknod'ed device nodes. Every process blocks reading one
control pipe whose write end only this benchmark holds, so closing it (or this process dying) ends them all;
process groups are killed as a last resort.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import resource
import shutil
import signal
import stat
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.support.readable import readable

PARENTS = 100
CHILDREN_PER_PARENT = 15
DEVICE_HOLDERS = 4
ROUNDS = 9
GOAL_VS_FLOOR = 1.3  # `holders --json` wall time at most this multiple of the readlink floor's, a process
DEVICE_RDEV = os.makedev(1, 8)  # /dev/random's driver: opens anywhere, held by nothing else here

FLOOR = "python: readlink every fd (a process)"
ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = ROOT / ".venv" / "bin"

# A sleeper family: 26 fds (0-2 /dev/null, 8 files, 3 pipes, 3 socket pairs, epoll, eventfd, the control
# pipe), then fork the children, report "ready", and block until the control pipe closes.
SLEEPER = r"""
import os, select, socket, sys
control = int(sys.argv[1]); files_dir = sys.argv[2]; children = int(sys.argv[3])
keep = [os.open(os.path.join(files_dir, f"f{i}"), os.O_RDONLY) for i in range(8)]
for _ in range(3):
    keep.extend(os.pipe())
for _ in range(3):
    keep.extend(socket.socketpair())
keep.append(select.epoll())
keep.append(os.eventfd(0))
pids = []
for _ in range(children):
    pid = os.fork()
    if pid == 0:
        os.read(control, 1)
        os._exit(0)
    pids.append(pid)
sys.stdout.write("ready\n"); sys.stdout.flush()
os.read(control, 1)
for pid in pids:
    os.waitpid(pid, 0)
"""

# The floor: one readlink per fd of every process, nothing kept; run as a process of its own (beside
# `holders`, a process too) and in this one.
READ_EVERY_LINK = r"""
import os
for name in os.listdir("/proc"):
    if not name.isdigit():
        continue
    try:
        dir_fd = os.open(f"/proc/{name}/fd", os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        continue
    try:
        for fd in range(os.fstat(dir_fd).st_size):
            os.readlink(str(fd), dir_fd=dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
"""

HOLDER = r"""
import os, sys
control = int(sys.argv[1])
fd = os.open(sys.argv[2], os.O_RDWR)
sys.stdout.write("ready\n"); sys.stdout.flush()
os.read(control, 1)
"""


def _wait_ready(procs: list[subprocess.Popen[bytes]], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    for proc in procs:
        assert proc.stdout is not None
        ready = readable([proc.stdout], deadline - time.monotonic())
        line = proc.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            raise RuntimeError(f"a benchmark process (pid {proc.pid}) did not start: {line!r}")


# An installed package has its bytecode compiled at install time; let the warm-up run write it here too.
ENV = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


Sample = tuple[float, float]  # (wall seconds, CPU seconds: user + system)


def timed(argv: list[str]) -> tuple[Sample, bytes]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=False, timeout=120, env=ENV
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # only this command ended since `before`
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return (wall, cpu), done.stdout


def _pids_in(text: bytes) -> set[int]:
    return {int(word) for word in text.decode().replace(":", " ").split() if word.isdigit()}


def _measure(work_dir: Path, holder_pids: set[int], ours: frozenset[int]) -> dict[str, list[Sample]]:
    """Interleaved rounds. Only the benchmark's own processes (`ours`) are compared: on a shared machine a
    stranger may hold /dev/random's numbers too, and every tool rightly finds it."""
    from watchdog.host.holders import HolderScanner

    nodes = sorted(str(p) for p in work_dir.glob("accel*"))
    python = str(VENV_BIN / "python")
    commands: dict[str, list[str]] = {
        "tpu-watchdog holders --json": [
            str(VENV_BIN / "tpu-watchdog"),
            "holders",
            "--json",
            "--device",
            f"{work_dir}/accel*",
            "--allow-number",
            "1:8",
        ],
        FLOOR: [python, "-c", READ_EVERY_LINK],
        "fuser": ["fuser", *nodes],
        "lsof -t": ["lsof", "-t", *nodes],
        "python -c pass": [python, "-c", "pass"],
    }
    checks: dict[str, Callable[[bytes], set[int]]] = {
        "tpu-watchdog holders --json": lambda out: {entry["pid"] for entry in json.loads(out)},
        "fuser": _pids_in,
        "lsof -t": _pids_in,
    }
    scanners = {
        f"scanner.scan() in-process, {n} worker{'s' if n > 1 else ''}": HolderScanner(
            patterns=(f"{work_dir}/accel*",),
            workers=n,
            allow_numbers=[(1, 8)],  # /dev/random's: class mem
        )
        for n in (1, 2)
    }
    floor = "floor: one readlink per fd, nothing else (in-process)"
    samples: dict[str, list[Sample]] = {name: [] for name in [*commands, *scanners, floor]}
    floor_code = compile(READ_EVERY_LINK, "<floor>", "exec")
    for argv in commands.values():
        timed(argv)  # warm-up, not measured: bytecode written, caches as warm for every tool
    for _ in range(ROUNDS):
        for name, argv in commands.items():
            sample, out = timed(argv)
            samples[name].append(sample)
            found_by_tool = (checks[name](out) if name in checks else holder_pids) & ours
            if found_by_tool != holder_pids:
                raise RuntimeError(f"{name} found {sorted(found_by_tool)}, expected {sorted(holder_pids)}")
        for name, scanner in scanners.items():
            start, cpu_start = time.perf_counter(), time.process_time()
            found = {h.pid for h in scanner.scan().holders} & ours
            samples[name].append((time.perf_counter() - start, time.process_time() - cpu_start))
            assert found == holder_pids, (found, holder_pids)
        start, cpu_start = time.perf_counter(), time.process_time()
        exec(floor_code, {})  # noqa: S102 - the floor's own fixed text, above
        samples[floor].append((time.perf_counter() - start, time.process_time() - cpu_start))
    return samples


def _count_fds(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += len(os.listdir(f"/proc/{pid}/fd"))
    return total


def _descendants(roots: set[int]) -> list[int]:
    """The roots and their children (one level is enough: sleepers do not fork further)."""
    found = set(roots)
    for pid in roots:
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        found.update(int(c) for c in children)
    return sorted(found)


def _stop(procs: list[subprocess.Popen[bytes]], control_write: int | None) -> None:
    if control_write is not None:
        os.close(control_write)  # every sleeper and holder reads EOF and exits
    deadline = time.monotonic() + 30
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: the group is ours alone
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@dataclasses.dataclass(frozen=True)
class BusyHost:
    """The busy host while it stands: its device nodes, the processes holding them, and its size."""

    work_dir: Path
    holder_pids: set[int]
    processes: int  # started here, holders included
    pids: frozenset[int]  # all of them
    fds: int  # open in those processes


@contextlib.contextmanager
def busy_host() -> Iterator[BusyHost]:
    """Start the sleepers and the device holders, yield once all are ready, stop them all on the way out."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    work_dir = Path(tempfile.mkdtemp(prefix="bench-holders-", dir="/tmp"))  # /tmp is ext4 here (mknod)
    procs: list[subprocess.Popen[bytes]] = []
    control_read, control_write = os.pipe()
    control: int | None = control_write
    try:
        for i in range(8):
            (work_dir / f"f{i}").write_bytes(b"x")
        for i in range(DEVICE_HOLDERS):
            os.mknod(work_dir / f"accel{i}", stat.S_IFCHR | 0o600, DEVICE_RDEV)

        def start(script: str, *args: str) -> subprocess.Popen[bytes]:
            proc = subprocess.Popen(
                [sys.executable, "-c", script, str(control_read), *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                pass_fds=(control_read,),
                start_new_session=True,
            )
            procs.append(proc)
            return proc

        started = time.monotonic()
        for _ in range(PARENTS):
            start(SLEEPER, str(work_dir), str(CHILDREN_PER_PARENT))
        holders = [start(HOLDER, str(work_dir / f"accel{i}")) for i in range(DEVICE_HOLDERS)]
        _wait_ready(procs)
        os.close(control_read)
        control_read = -1
        all_pids = _descendants({p.pid for p in procs})
        fds = _count_fds(all_pids)
        setup_s = time.monotonic() - started
        sys.stderr.write(f"{len(all_pids)} processes, {fds} fds, ready in {setup_s:.1f} s; measuring\n")
        yield BusyHost(work_dir, {p.pid for p in holders}, len(all_pids), frozenset(all_pids), fds)
    finally:
        if control_read >= 0:
            os.close(control_read)
        _stop(procs, control)
        shutil.rmtree(work_dir, ignore_errors=True)


def host_processes() -> int:
    return sum(1 for name in os.listdir("/proc") if name.isdigit())


def run() -> str:
    if shutil.which("lsof") is None or shutil.which("fuser") is None:
        return "## holders\n\nSkipped: `lsof` and `fuser` (apt packages lsof, psmisc) are needed.\n"
    with busy_host() as host:
        samples = _measure(host.work_dir, host.holder_pids, host.pids)
        host_procs = host_processes()
    return _report(samples, host.processes, host.fds, host_procs)


def _report(samples: dict[str, list[Sample]], procs: int, fds: int, host_procs: int) -> str:
    wall = {name: statistics.median(w for w, _ in values) * 1000 for name, values in samples.items()}
    cpu = {name: statistics.median(c for _, c in values) * 1000 for name, values in samples.items()}
    vs_floor = wall["tpu-watchdog holders --json"] / wall[FLOOR]
    load = os.getloadavg()

    def verdict(ok: bool) -> str:
        return "met" if ok else "**missed**"

    rows = "\n".join(
        f"| {name} | {wall[name]:.0f} | {min(w for w, _ in values) * 1000:.0f} | "
        f"{max(w for w, _ in values) * 1000:.0f} | {cpu[name]:.0f} |"
        for name, values in samples.items()
    )
    return f"""## holders

Finding {DEVICE_HOLDERS} holders of mknod'ed device nodes among {procs} extra processes holding {fds} fds
({host_procs} processes on the host in all), {ROUNDS} interleaved rounds after one warm-up; whole-process
wall time with stdout captured and stderr discarded, and the CPU time (user + system) the run used.
Load average at the end: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (the 2 cores are shared).
Run: `.venv/bin/python -m bench holders`.

| command | median wall ms | min ms | max ms | median CPU ms |
| --- | ---: | ---: | ---: | ---: |
{rows}

Goal: `tpu-watchdog holders --json` <= {GOAL_VS_FLOOR}x the wall time of `{FLOOR}` (the least a scan of
fd links can do, a process too), medians of the same rounds: {vs_floor:.2f}x,
{verdict(vs_floor <= GOAL_VS_FLOOR)}.
"""


if __name__ == "__main__":
    sys.stdout.write(run() + "\n")
