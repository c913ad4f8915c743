"""Event -> SIGTERM against the size of the host: 0 to 1,500 other processes, before and after, side by side.

One private PID namespace (nothing outside it can be signalled). Other processes are families of sleepers
holding 26 fds each (the busy host of `bench holders`), added in steps. At each size, daemons of two trees
take turns, ROUNDS each, interleaved: BEFORE (`EVENT_SCALE_BEFORE`: a checkout's path or a commit; by default
this repository's `main`, extracted) and AFTER (this tree). For each of EVENTS events: a holder that has held
the device since before the daemon's last scan (the warm index has it) and a new job forked just before the
event (a PID the index has not seen: scanned first, before the full scan); PUT of
TERMINATE_ON_HOST_MAINTENANCE on the fake at t0, and each one's SIGTERM handler writes its CLOCK_MONOTONIC
time to a pipe; then NONE, the daemon back to idle with the new job gone, and its CPU time still for 0.3 s
(the scan after a drain is over: on a real host the next event comes long after). Both must be signalled every
time: a missed one fails the benchmark."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import percentile

REPO = Path(__file__).resolve().parents[1]
SIZES = (0, 300, 750, 1500)  # other processes (families of 15: a parent and 14 children)
EVENTS = 20
ROUNDS = 2
GOAL_P99_MS = 10.0  # the indexed holder, from the answer
GOAL_NEW_JOB_P99_MS = 20.0  # the new job, from the answer

DRIVER = r"""
import json, os, select, signal, socket, stat, subprocess, sys, time, urllib.request
from pathlib import Path
from bench.bench_holders import SLEEPER
from watchdog.fake.server import FakeMetadataServer
from watchdog.fake import handler as fake_handler
from bench import driver
import functools

# When the fake has written the TERMINATE answer to the daemon's hanging GET: where the daemon's share of
# the path starts (before it: the PUT, and the fake's threads waking, which a real metadata server does not
# share with this process). Timed in the fake's own handler thread, right after its write.
answers_sent = []
_send = fake_handler._Handler._send
def _timed_send(self, answer, *args, **kwargs):
    _send(self, answer, *args, **kwargs)
    if "/instance/maintenance-event" in self.path and answer.body.startswith(b"TERM"):
        answers_sent.append(time.monotonic())
fake_handler._Handler._send = _timed_send

tmp, trees, sizes, events, rounds = (Path(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3]),
                                     int(sys.argv[4]), int(sys.argv[5]))
device = tmp / "accel0"
# A number no driver has (no sysfs entry: watched, with a warning, by every tree compared); O_PATH holds it.
os.mknod(device, stat.S_IFCHR | 0o600, os.makedev(4000, 162))
files = tmp / "files"
files.mkdir()
for i in range(8):
    (files / f"f{i}").write_bytes(b"x")
KEY = "instance/maintenance-event"
control_read, control_write = os.pipe()
read_end, write_end = os.pipe()
os.set_blocking(read_end, False)

def holder(exit_on_term):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    pid = os.fork()
    if pid == 0:
        fd = os.open(device, os.O_PATH)
        def term(*_):
            os.write(write_end, f"{os.getpid()} {time.monotonic()}\n".encode())
            if exit_on_term:
                os._exit(0)
        signal.signal(signal.SIGTERM, term)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        while True:
            signal.pause()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    return pid

buffer = b""
def terms(pids, timeout):
    global buffer
    found, deadline = {}, time.monotonic() + timeout
    while set(pids) - set(found):
        while b"\n" in buffer:
            line, _, buffer = buffer.partition(b"\n")
            pid, at = line.split()
            found[int(pid)] = float(at)
        if not set(pids) - set(found):
            break
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no SIGTERM reached {sorted(set(pids) - set(found))}: a holder was missed")
        select.select([read_end], [], [], left)
        try:
            buffer += os.read(read_end, 4096)
        except BlockingIOError:
            pass
    return found

sleepers = []
def grow(to):
    while len(sleepers) * 15 < to:
        sleepers.append(subprocess.Popen([sys.executable, "-c", SLEEPER, str(control_read), str(files), "14"],
                                         stdout=subprocess.PIPE, pass_fds=(control_read,)))
    for proc in sleepers:
        if not getattr(proc, "ready", False):
            assert proc.stdout.readline().strip() == b"ready"
            proc.ready = True

def fds_of_others():
    total = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                total += len(os.listdir(f"/proc/{name}/fd"))
            except OSError:
                pass
    return total

def cpu_ticks(pid):
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])

def settled(pid):
    # Its CPU time unchanged for 0.3 s: the scan that follows a drain is over, as it would be long before
    # the next event on a real host (events are rare; an idle refresh comes once a minute).
    last, same, deadline = cpu_ticks(pid), 0, time.monotonic() + 60
    while same < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
        now = cpu_ticks(pid)
        same, last = (same + 1 if now == last else 0), now

results = []
with FakeMetadataServer(listen="127.0.0.1:0") as fake:
    control = f"http://{fake.address}/_fake/v1/{KEY}"
    put = functools.partial(driver.put, control)
    status = driver.status
    def wait(condition, timeout=60):
        driver.wait(condition, timeout, lambda: f"; daemon exit {daemon.poll()}, /status {status(port)}")
    (tmp / "empty.toml").write_text("")
    kept = holder(exit_on_term=False)
    for size in sizes:
        grow(size)
        row = {"others": len(sleepers) * 15, "fds": fds_of_others(), "trees": {}}
        for _ in range(rounds):
            for name, tree in trees.items():
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", 0))
                    port = probe.getsockname()[1]
                state = tmp / f"state-{name}"
                daemon = subprocess.Popen(
                    [sys.executable, "-m", "watchdog", "run", "--config", str(tmp / "empty.toml"),
                     "--metadata-host", fake.address, "--device", str(device), "--state-dir", str(state),
                     "--listen", f"127.0.0.1:{port}", "--log-level", "error"],
                    cwd=tree, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": tree})
                ready = lambda: (status(port)["state"] == "idle"
                                 and [h["pid"] for h in status(port)["holders"]] == [kept])
                answered = lambda: all(m["value"] is not None for m in status(port)["metadata"].values())
                wait(lambda: ready() and answered())
                settled(daemon.pid)
                got = row["trees"].setdefault(
                    name, {"indexed": [], "answered": [], "newcomer": [], "new_answered": []})
                for _ in range(events):
                    newcomer = holder(exit_on_term=True)
                    answers_sent.clear()
                    t0 = time.monotonic()
                    put("TERMINATE_ON_HOST_MAINTENANCE")
                    at = terms([kept, newcomer], 10)
                    got["indexed"].append(at[kept] - t0)
                    got["answered"].append(at[kept] - answers_sent[0])
                    got["newcomer"].append(at[newcomer] - t0)
                    got["new_answered"].append(at[newcomer] - answers_sent[0])
                    put("NONE")
                    os.waitpid(newcomer, 0)
                    wait(ready)
                    settled(daemon.pid)
                daemon.terminate()
                daemon.wait(timeout=20)
        results.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
os.kill(kept, signal.SIGKILL)  # first: forked from here, it holds the control pipe's write end too
os.waitpid(kept, 0)
os.close(control_write)
for proc in sleepers:
    proc.wait()
print(json.dumps(results))
"""


def _main_checkout(into: Path, rev: str = "main") -> str:
    """This repository's `rev` (its local `main` by default), extracted to `into`; its short commit id."""
    into.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], stdout=subprocess.PIPE, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", rev], stdout=subprocess.PIPE,
                            text=True, check=True)  # fmt: skip
    return commit.stdout.strip()


def before_tree(variable: str, into: Path) -> tuple[str, str]:
    """The BEFORE tree and how the page names it: the checkout `variable` names (a directory, named by
    the variable, never by its path: the page is read elsewhere), or the commit it names, or `main`."""
    given = os.environ.get(variable)
    if given and Path(given).is_dir():
        return given, f"the tree `{variable}` names"
    commit = _main_checkout(into, given or "main")
    return str(into), f"main at {commit}" if not given else f"commit {commit}"


def run() -> str:
    sizes = json.loads(os.environ.get("EVENT_SCALE_SIZES", json.dumps(SIZES)))
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-event-scale-") as tmp:
        before, label = before_tree("EVENT_SCALE_BEFORE", Path(tmp) / "before")
        trees = {"before": before, "after": str(REPO)}
        done = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", DRIVER, tmp,
             json.dumps(trees), json.dumps(sizes), str(EVENTS), str(ROUNDS)],
            stdout=subprocess.PIPE, text=True, timeout=3600, check=True, cwd=REPO,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
        )  # fmt: skip
    rows: list[dict[str, object]] = json.loads(done.stdout.strip().splitlines()[-1])
    load1 = os.getloadavg()

    def ms(values: list[float]) -> str:
        in_ms = [v * 1000 for v in values]
        return f"{statistics.median(in_ms):.1f} / {percentile(in_ms, 0.99):.1f}"

    indexed_lines: list[str] = []
    new_lines: list[str] = []
    worst, worst_new = 0.0, 0.0
    for row in rows:
        got: dict[str, dict[str, list[float]]] = row["trees"]  # type: ignore[assignment]
        worst = max(worst, percentile([v * 1000 for v in got["after"]["answered"]], 0.99))
        worst_new = max(worst_new, percentile([v * 1000 for v in got["after"]["new_answered"]], 0.99))
        for lines, answer, put in (
            (indexed_lines, "answered", "indexed"),
            (new_lines, "new_answered", "newcomer"),
        ):
            lines.append(
                f"| {row['others']} | {row['fds']} | {ms(got['before'][answer])} "
                f"| {ms(got['after'][answer])} | {ms(got['before'][put])} | {ms(got['after'][put])} |"
            )
    at_most = rows[-1]
    met = "met" if worst <= GOAL_P99_MS else "NOT met"
    met_new = "met" if worst_new <= GOAL_NEW_JOB_P99_MS else "NOT met"
    n = EVENTS * ROUNDS
    head = [
        "| other processes | their fds (all in the namespace) | from the answer, before: p50 / p99 ms "
        "| from the answer, after | from the PUT, before | from the PUT, after |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    return "\n".join(
        [
            "## Event to SIGTERM against the host's size (`bench_event_scale`)",
            "",
            "The event reaches the daemon (the fake has written TERMINATE_ON_HOST_MAINTENANCE to its hanging "
            "GET: 'from the answer', the daemon's share) or is PUT on the fake ('from the PUT', the fake's "
            f"share too) -> the holders' SIGTERM handlers run; {n} "
            f"events per tree and size ({ROUNDS} rounds of {EVENTS}, the trees taking turns), a private PID "
            "namespace; other processes hold 26 fds each. Before: "
            f"{label}; after: this tree. Every holder got its SIGTERM in every event. Load average "
            f"{load0[0]:.1f} at the start, {load1[0]:.1f} at the end (2 shared cores). Run: "
            "`.venv/bin/python -m bench event_scale`.",
            "",
            "A holder present since before the daemon's last scan (the warm index has it: re-checked and "
            "signalled first):",
            "",
            *head,
            *indexed_lines,
            "",
            "A new job: a holder forked just before the event, a PID the index has not seen (scanned on its "
            "own before the full scan, which an old process that opened a device since still waits for):",
            "",
            *head,
            *new_lines,
            "",
            f"Goals, with {at_most['others']} other processes (and at every size), no holder missed: p99 <= "
            f"{GOAL_P99_MS:.0f} ms from the answer for the indexed holder: **{met}** (worst p99 after: "
            f"{worst:.1f} ms); p99 <= {GOAL_NEW_JOB_P99_MS:.0f} ms from the answer for the new job: "
            f"**{met_new}** (worst p99 after: {worst_new:.1f} ms).",
        ]
    )


if __name__ == "__main__":
    sys.stdout.write(run() + "\n")
