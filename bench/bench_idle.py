"""Idle footprint of a real `tpu-watchdog run`: what the daemon costs a TPU VM on the days nothing happens.

A `tpu-watchdog fake-metadata` subprocess serves the metadata; the daemon runs as a subprocess with the
production hanging-GET timeout (60 s), a device pattern that matches nothing, and its HTTP listener. After it
settles, IDLE_SECONDS of nothing: CPU seconds from each thread's /proc/PID/task/TID/schedstat (nanoseconds on
a CPU; utime + stime count 10 ms ticks, too coarse for a goal of 30 ms a minute) before and after, peak RSS
(VmHWM), metadata requests per minute from the fake's GET /_fake/requests, context switches per second
summed over every thread (voluntary + involuntary: how often the daemon wakes up), and its threads.
Goals: CPU < CPU_GOAL of a core, at most SWITCH_GOAL switches a second: an idle daemon wakes for its
hanging GETs' answers and its idle holder scan, and little else.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

IDLE_SECONDS = 60.0
RUNS = 3  # daemons per scenario: the row is the run with the median wakeups (this machine is shared, noisy)
SETTLE_SECONDS = 5.0  # after the first answers: start-up imports and the host-info read are not idle cost
CPU_GOAL = 0.0005  # of one core (0.05 %)
SWITCH_GOAL = 1.0  # context switches a second, all threads together
RSS_GOAL_MB = 40.0
REPO = Path(__file__).resolve().parent.parent
# A character device number nothing on the machine holds (major 4000: far above any registered driver).
UNHELD_RDEV = (4000, 77)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 - loopback URL of our own servers
        body: bytes = answer.read()
        return body


def _wait(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():  # type: ignore[operator]
                return
        except OSError:
            pass  # not listening yet
        assert time.monotonic() < deadline, f"benchmark precondition timed out: {what}"
        time.sleep(0.1)


def cpu_seconds(task: Path) -> float:
    """Time one thread (/proc/PID/task/TID) has run on a CPU: the first field of its schedstat, in ns."""
    return int((task / "schedstat").read_text().split()[0]) / 1e9


def status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {key} in /proc/{pid}/status")


# x86-64 numbers of the calls an idle thread waits in (/proc/PID/task/TID/syscall): Python does not name
# its threads for the kernel, so what a thread is blocked in is how it is told apart.
SYSCALLS = {"x86_64": {7: "poll", 23: "select", 45: "recvfrom", 202: "futex", 232: "epoll_wait", 0: "read"}}


def _blocked_in(task: Path) -> str:
    try:
        number = int((task / "syscall").read_text().split()[0])
    except (OSError, ValueError):
        return "running"
    return SYSCALLS.get(os.uname().machine, {}).get(number, f"syscall {number}")


@dataclass(frozen=True)
class ThreadSample:
    label: str  # main thread or not, and what it waits in
    switches: int  # voluntary + involuntary context switches: how often it woke up
    cpu: float  # seconds


def threads_of(pid: int) -> dict[str, ThreadSample]:
    """Thread id -> its sample: a thread that wakes on a timer, or burns CPU, shows here."""
    threads: dict[str, ThreadSample] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "status").read_text()
            cpu = cpu_seconds(task)
        except FileNotFoundError:
            continue  # the thread ended
        values = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        role = "main loop" if task.name == str(pid) else "thread"
        switches = int(values["voluntary_ctxt_switches"]) + int(values["nonvoluntary_ctxt_switches"])
        threads[task.name] = ThreadSample(f"{role} {task.name} (waits in {_blocked_in(task)})", switches, cpu)
    return threads


def metadata_requests(fake: str) -> int:
    """Metadata requests the fake has answered so far (a hanging GET is logged when it returns)."""
    return len(json.loads(_get(f"http://{fake}/_fake/requests")))


@dataclass
class Footprint:
    scenario: str
    seconds: float
    cpu_seconds: float
    peak_rss_mb: float
    rss_mb: float
    requests_per_min: float
    switches_per_sec: float
    threads: list[tuple[str, float, float]] = field(default_factory=list)  # label, switches/s, CPU s
    load: float = 0.0  # the machine's 1-minute load average at the end: others' work skews the figures
    runs: tuple[float, ...] = ()  # switches/s of every run of its scenario, this one's among them

    @property
    def cpu_fraction(self) -> float:
        return self.cpu_seconds / self.seconds


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start_fake(
    work: Path, env: dict[str, str]
) -> tuple[str, subprocess.Popen[bytes], tuple[IO[str], IO[str]]]:
    """A `tpu-watchdog fake-metadata` on a free loopback port, answering; its log and the daemon's, open."""
    fake = f"127.0.0.1:{_free_port()}"
    logs = (work / "fake.log").open("w"), (work / "daemon.log").open("w")
    fake_proc = subprocess.Popen(
        [sys.executable, "-m", "watchdog", "fake-metadata", "--listen", fake],
        stdout=logs[0], stderr=subprocess.STDOUT, cwd=REPO, env=env,
    )  # fmt: skip
    try:
        _wait(lambda: metadata_requests(fake) >= 0, 20, "the fake metadata server")
    except BaseException:
        _stop(fake_proc)
        raise
    return fake, fake_proc, logs


def measure(scenario: str, device_exists: bool, idle_seconds: float = IDLE_SECONDS) -> Footprint:
    """One idle daemon; `device_exists`: a real (unheld) device node matches the pattern, as on a TPU VM
    between jobs, so the periodic holders scan walks every process's fds; else the pattern matches nothing."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as tmp:
        work = Path(tmp)
        (work / "empty.toml").write_text("")
        if device_exists:
            os.mknod(work / "accel0", 0o600 | stat.S_IFCHR, os.makedev(*UNHELD_RDEV))
        fake, fake_proc, logs = start_fake(work, env)
        listen = f"127.0.0.1:{_free_port()}"
        daemon = None
        try:
            daemon = subprocess.Popen(
                [sys.executable, "-m", "watchdog", "run", "--config", str(work / "empty.toml"),
                 "--metadata-host", fake, "--device", str(work / "accel*"),
                 "--state-dir", str(work / "state"), "--listen", listen],
                stdout=logs[1], stderr=subprocess.STDOUT, cwd=REPO, env=env,
            )  # fmt: skip
            _wait(lambda: b'"state": "idle"' in _get(f"http://{listen}/status"), 30, "the daemon's /status")
            time.sleep(SETTLE_SECONDS)
            pid = daemon.pid
            req0, th0, t0 = metadata_requests(fake), threads_of(pid), time.monotonic()
            time.sleep(idle_seconds)
            req1, th1, t1 = metadata_requests(fake), threads_of(pid), time.monotonic()
            hwm_kb, rss_kb = status_kb(pid, "VmHWM"), status_kb(pid, "VmRSS")
            assert daemon.poll() is None, (work / "daemon.log").read_text()
        finally:
            _stop(daemon)
            _stop(fake_proc)
            for log in logs:
                log.close()
    elapsed = t1 - t0
    threads = []
    for tid, after in th1.items():
        before = th0.get(tid, ThreadSample("", 0, 0.0))
        threads.append((after.label, (after.switches - before.switches) / elapsed, after.cpu - before.cpu))
    threads.sort(key=lambda t: (-t[1], -t[2]))
    return Footprint(
        scenario=scenario,
        seconds=elapsed,
        cpu_seconds=sum(t[2] for t in threads),  # a thread that ended in the window is not counted
        peak_rss_mb=hwm_kb / 1024,
        rss_mb=rss_kb / 1024,
        requests_per_min=(req1 - req0) * 60.0 / elapsed,
        switches_per_sec=sum(t[1] for t in threads),
        threads=threads,
        load=os.getloadavg()[0],
    )


def scan_cost(scans: int = 10) -> tuple[float, int, int]:
    """CPU seconds of one holders scan with a present device node (what the daemon does every
    HOLDER_REFRESH s when idle), and the processes and fds it walked."""
    import resource

    from watchdog.host.holders import HolderScanner

    with tempfile.TemporaryDirectory(prefix="bench-idle-scan-") as tmp:
        os.mknod(Path(tmp) / "accel0", 0o600 | stat.S_IFCHR, os.makedev(*UNHELD_RDEV))
        scanner = HolderScanner(patterns=(f"{tmp}/accel*",))
        scanner.scan()
        before = resource.getrusage(resource.RUSAGE_THREAD)
        for _ in range(scans):
            scanner.scan()
        after = resource.getrusage(resource.RUSAGE_THREAD)
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / scans
    pids = [p for p in Path("/proc").iterdir() if p.name.isdigit()]
    fds = 0
    for pid in pids:
        try:
            fds += len(os.listdir(pid / "fd"))
        except OSError:
            continue  # gone, or not ours to read
    return cpu, len(pids), fds


def _verdict(ok: bool) -> str:
    return "**met**" if ok else "**NOT met**"


def _row(f: Footprint) -> str:
    return (
        f"| {f.scenario} | {f.cpu_seconds * 1000:.1f} ms = {f.cpu_fraction * 100:.3f} %: "
        f"{_verdict(f.cpu_fraction < CPU_GOAL)} "
        f"| {f.switches_per_sec:.2f} ({', '.join(f'{r:.2f}' for r in f.runs)}): "
        f"{_verdict(f.switches_per_sec <= SWITCH_GOAL)} | {len(f.threads)} "
        f"| {f.peak_rss_mb:.1f} MB: {_verdict(f.peak_rss_mb < RSS_GOAL_MB)} "
        f"| {f.requests_per_min:.1f} | {f.load:.2f} |"
    )


def median_run(scenario: str, device_exists: bool) -> Footprint:
    """RUNS idle daemons of one scenario: the one with the median wakeups, all runs' rates noted in it."""
    runs = sorted((measure(scenario, device_exists) for _ in range(RUNS)), key=lambda f: f.switches_per_sec)
    middle = runs[len(runs) // 2]
    middle.runs = tuple(f.switches_per_sec for f in runs)
    return middle


def run() -> str:
    results = [median_run("device pattern matching nothing", device_exists=False)]
    try:
        between_jobs = "device node present, not held (a TPU VM between jobs)"
        results.append(median_run(between_jobs, device_exists=True))
    except PermissionError:
        sys.stderr.write("bench idle: mknod not permitted (needs root): device-present scenario skipped\n")
    rows = "\n".join(_row(f) for f in results)
    from watchdog.daemon.departures import DEPARTURE_CHECK
    from watchdog.daemon.device_watch import DEVICE_CHECK
    from watchdog.daemon.index import HOLDER_REFRESH
    from watchdog.daemon.loop import LOOP_CEILING

    scan_cpu, processes, fds = scan_cost()
    last = results[-1]
    threads = "\n".join(f"| {label} | {rate:.3f} | {cpu * 1000:.1f} |" for label, rate, cpu in last.threads)
    return f"""## Idle footprint (`bench_idle`)

A real `tpu-watchdog run` subprocess with the production hanging-GET timeout (60 s), watching a
`tpu-watchdog fake-metadata` subprocess, its HTTP listener up, nothing happening; measured over
{IDLE_SECONDS:.0f} s, {SETTLE_SECONDS:.0f} s after the first answers. CPU: the time its threads ran
(each thread's schedstat, in ns), as a share of one core; wakeups: the voluntary and involuntary context
switches of all the daemon's threads per second (/proc/PID/task/*/status), and metadata requests per
minute (the fake's /_fake/requests); peak RSS: VmHWM. Each scenario runs {RUNS} daemons one after the
other: its row is the run with the median switches/s (every run's rate in brackets, lowest first).
Goals: CPU < {CPU_GOAL * 100:.2f} % of one core, at most
{SWITCH_GOAL:g} context switch a second, peak RSS < {RSS_GOAL_MB:.0f} MB. Other work on the machine shows
in these figures: the load column is the 1-minute load average at the end of each run.

| scenario | CPU in {IDLE_SECONDS:.0f} s | switches/s | threads | peak RSS | metadata requests/min | load |
| --- | --- | --- | --- | --- | --- | --- |
{rows}

What wakes an idle daemon: each watch when its hanging GET answers (the server returns every 60, 58 and 56 s
with no change, about 3 answers a minute, apart), the metadata deadline thread about once per read timeout,
the holder index for its scan every HOLDER_REFRESH = {HOLDER_REFRESH:g} s (half of that after the watches'
answers: threads that wake together hand the GIL to each other, a context switch each time), and the main
loop, which
sleeps until its next due time: idle, the look at the device nodes every DEVICE_CHECK = {DEVICE_CHECK:g} s
(a due time kept on the wall clock, such as a notice's before-window SIGTERM, is looked at again every
LOOP_CEILING = {LOOP_CEILING:g} s). Every other thread blocks without a timeout: the HTTP listener until a
client connects, the signals thread until a signal comes (setting the stop ends the hanging GETs). Not in
these figures: under systemd the loop also sends a watchdog ping every WatchdogSec / 2 (15 s with the
shipped unit), and while a process holds a device the loop looks for its exit every DEPARTURE_CHECK =
{DEPARTURE_CHECK:g} s.

With a device present, each idle scan walks every process's fds: one scan costs {scan_cpu * 1000:.1f} ms of
CPU here ({processes} processes, {fds} fds), i.e. {scan_cpu / HOLDER_REFRESH * 100:.3f} % of a core at that
refresh.

Threads of the last scenario, by wakeups (Python does not name its threads for the kernel: each is told by
the system call it waits in):

| thread | switches/s | CPU ms |
| --- | --- | --- |
{threads}
"""
