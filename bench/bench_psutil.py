"""Where psutil serves and where the hand-written /proc reading stays, measured side by side on the busy host
of `bench holders` (~1,600 processes, ~41,000 fds, 4 holders of mknod'ed nodes).

Three questions, each answered by rows measured in the same interleaved rounds:
- the scan: psutil has no call that lists the fds of a process that are device nodes (`open_files()` keeps
  regular files only), so the nearest psutil scan is `process_iter()` plus a readlink of every fd;
- a holder's facts: what the scan reads of each holder anyway (stat, cmdline, status, cgroup) against
  psutil reading the same, and the extra facts `holders` now reports (`watchdog/host/facts.py`);
- start-up: what importing psutil adds to a `holders` run, with and without the facts.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable

from bench.bench_holders import ROUNDS, VENV_BIN, BusyHost, Sample, busy_host, host_processes, timed

# The rows, in the order of the table.
SCAN_OURS = "scan: ours, HolderScanner.scan()"
SCAN_NEAREST = "scan: psutil.process_iter() + readlink of every fd"
SCAN_OPEN_FILES = "scan: psutil Process.open_files() of every process"
FACTS_OURS = "facts: ours, stat + cmdline + status + cgroup"
FACTS_PSUTIL = "facts: psutil, name + cmdline + uids + ppid in oneshot()"
CHILDREN_OURS = "facts: children, ours (Procfs.children)"
CHILDREN_PSUTIL = "facts: children, psutil Process.children()"
FACTS_ADDED = "facts: holder_facts(), all that `holders` adds"
START_BARE = "start-up: python -c pass"
START_PSUTIL = "start-up: python -c 'import psutil'"
HOLDERS_WITH = "tpu-watchdog holders (with psutil facts)"
HOLDERS_WITHOUT = "tpu-watchdog holders, facts stubbed out (no psutil)"

FACT_REPEATS = 25  # per holder and round: a holder's facts take microseconds

# `holders` with the facts module replaced by one that knows nothing: the same run without psutil.
WITHOUT_FACTS = """
import sys, types
stub = types.ModuleType("watchdog.host.facts")
stub.holder_facts = lambda holders, proc_root: {}
sys.modules["watchdog.host.facts"] = stub
from watchdog.cli import main
sys.exit(main(sys.argv[1:]))
"""


def psutil_scan(paths: frozenset[str]) -> set[int]:
    """The nearest scan psutil allows: its process list, then every fd's link read here (matched by path
    only, which makes it cheaper than the real scan, never dearer)."""
    import psutil

    found = set()
    for proc in psutil.process_iter():
        fd_dir = f"/proc/{proc.pid}/fd"
        try:
            names = os.listdir(fd_dir)
        except OSError:
            continue
        for name in names:
            try:
                target = os.readlink(f"{fd_dir}/{name}")
            except OSError:
                continue
            if target in paths:
                found.add(proc.pid)
    return found


def psutil_open_files() -> set[int]:
    """psutil's public answer to "which files are open": every process's `open_files()`; device nodes are
    not regular files, so it finds none of the holders."""
    import psutil

    found = set()
    for proc in psutil.process_iter():
        try:
            if any(f.path.startswith("/tmp/bench-holders-") for f in proc.open_files()):  # noqa: S108
                found.add(proc.pid)
        except psutil.Error:
            continue
    return found


def _in_process(work: Callable[[], object], times: int = 1) -> Sample:
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(times):
        work()
    return time.perf_counter() - start, time.process_time() - cpu_start


def _measure(host: BusyHost) -> tuple[dict[str, list[Sample]], dict[str, set[int]]]:
    import psutil

    from watchdog.host.facts import holder_facts
    from watchdog.host.holders import HolderScanner
    from watchdog.host.procfs import Procfs

    pattern = f"{host.work_dir}/accel*"
    scanner = HolderScanner(patterns=(pattern,), allow_numbers=[(1, 8)])  # bench holders' nodes: class mem
    devices = scanner.devices()
    procfs = Procfs()
    holders = [h for h in scanner.scan().holders if h.pid in host.holder_pids]  # not others on (1, 8)
    pids = [h.pid for h in holders]

    def ours_facts() -> None:
        for pid in pids:
            procfs.stat(pid), procfs.cmdline(pid), procfs.real_uid(pid), procfs.cgroup(pid)

    def psutil_facts() -> None:
        for pid in pids:
            proc = psutil.Process(pid)
            with proc.oneshot():
                proc.name(), proc.cmdline(), proc.uids(), proc.ppid()

    def our_children() -> None:
        for pid in pids:
            procfs.children(pid)

    def psutil_children() -> None:
        for pid in pids:
            psutil.Process(pid).children()

    scans: dict[str, Callable[[], set[int]]] = {
        SCAN_OURS: lambda: {h.pid for h in scanner.scan().holders},
        SCAN_NEAREST: lambda: psutil_scan(devices.paths),
        SCAN_OPEN_FILES: psutil_open_files,
    }
    facts: dict[str, tuple[Callable[[], object], int]] = {  # what, and how many times a round
        FACTS_OURS: (ours_facts, FACT_REPEATS),
        FACTS_PSUTIL: (psutil_facts, FACT_REPEATS),
        CHILDREN_OURS: (our_children, FACT_REPEATS),
        CHILDREN_PSUTIL: (psutil_children, 1),  # reads every process's stat
        FACTS_ADDED: (lambda: holder_facts(holders), FACT_REPEATS),
    }
    tool = str(VENV_BIN / "tpu-watchdog")
    python = str(VENV_BIN / "python")
    commands = {
        START_BARE: [python, "-c", "pass"],
        START_PSUTIL: [python, "-c", "import psutil"],
        HOLDERS_WITH: [tool, "holders", "--device", pattern, "--allow-number", "1:8"],
        HOLDERS_WITHOUT: [python, "-c", WITHOUT_FACTS, "holders",
                                                                "--device", pattern, "--allow-number", "1:8"],
    }  # fmt: skip
    samples: dict[str, list[Sample]] = {name: [] for name in [*scans, *facts, *commands]}
    found: dict[str, set[int]] = {}
    for argv in commands.values():
        timed(argv)  # warm-up: bytecode written, caches warm
    for _ in range(ROUNDS):
        for name, scan in scans.items():
            samples[name].append(_in_process(lambda: found.__setitem__(name, scan())))  # noqa: B023 - called at once
        for name, (work, times) in facts.items():
            wall, cpu = _in_process(work, times)
            per = times * len(pids)
            samples[name].append((wall / per, cpu / per))
        for name, argv in commands.items():
            sample, out = timed(argv)
            samples[name].append(sample)
            if name.startswith("tpu-watchdog"):
                found[name] = {int(line.split()[1]) for line in out.decode().splitlines()[1:]}
    return samples, found


def run() -> str:
    with busy_host() as host:
        samples, found = _measure(host)
        host_procs = host_processes()
    return _report(samples, found, host, host_procs)


def times(ratio: float) -> str:
    return f"{ratio:.2f}x" if ratio < 10 else f"{ratio:,.0f}x"


def _report(
    samples: dict[str, list[Sample]], found: dict[str, set[int]], host: BusyHost, host_procs: int
) -> str:
    wall = {name: statistics.median(w for w, _ in values) for name, values in samples.items()}
    cpu = {name: statistics.median(c for _, c in values) for name, values in samples.items()}

    def row(name: str) -> str:
        scale, unit = (1e6, "us") if name.startswith("facts") else (1e3, "ms")
        hits = f"{len(found[name] & host.holder_pids)} of {len(host.holder_pids)}" if name in found else "-"
        return f"| {name} | {wall[name] * scale:.0f} {unit} | {cpu[name] * scale:.0f} {unit} | {hits} |"

    rows = "\n".join(row(name) for name in samples)

    def ratio(slow: str, fast: str) -> str:
        """Both ratios: CPU time is the steadier one on a shared machine, wall time what a person waits."""
        by_cpu, by_wall = cpu[slow] / cpu[fast], wall[slow] / wall[fast]
        return f"{times(by_cpu)} the CPU and {times(by_wall)} the wall time"

    load = os.getloadavg()
    return f"""## psutil

Side by side on the busy host of `bench holders`: {host.processes} extra processes holding {host.fds} fds
({host_procs} processes on the host in all), {len(host.holder_pids)} of them holding mknod'ed nodes;
{ROUNDS} interleaved rounds after one warm-up. Scans and commands: median wall and CPU per run; facts: per
holder. "found" is how many of the holders a row's answer named. Load average at the end: {load[0]:.1f} /
{load[1]:.1f} / {load[2]:.1f} (the 2 cores are shared). Run: `.venv/bin/python -m bench psutil`.

| what | median wall | median CPU | found |
| --- | ---: | ---: | ---: |
{rows}

- Scan: psutil lists no device-node fds: `open_files()` found {len(found[SCAN_OPEN_FILES] & host.holder_pids)}
  of the holders, with {ratio(SCAN_OPEN_FILES, SCAN_OURS)} of our scan. Its nearest scan (its
  process list, then a readlink of every fd, matched by path only) took {ratio(SCAN_NEAREST, SCAN_OURS)}.
- The facts the scan reads anyway: psutil took {ratio(FACTS_PSUTIL, FACTS_OURS)} of ours, for fewer
  of them (psutil has no cgroup).
- Children: psutil's took {ratio(CHILDREN_PSUTIL, CHILDREN_OURS)} of ours.
- Importing psutil: {(cpu[START_PSUTIL] - cpu[START_BARE]) * 1e3:.0f} ms of CPU over `python -c pass`.
  `holders` with psutil's facts took {ratio(HOLDERS_WITH, HOLDERS_WITHOUT)} of `holders` without them.
"""


if __name__ == "__main__":
    sys.stdout.write(run() + "\n")
