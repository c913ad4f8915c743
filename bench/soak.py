"""The soak: a real daemon under random events, metadata faults, holders coming and going, and kill -9 /
graceful restarts, with its promises checked all along. `python -m bench.soak --seconds 60 --seed 1`.

Everything runs in a private PID namespace (the driver re-executes itself under `unshare`), so the daemon's
real, unnarrowed scanner sees only this run's processes. Holders are real processes holding a real device
node (/dev/full's numbers); each appends "PID TIME" to a shared log for every SIGTERM it receives, so the
count is taken where it matters. Crashes and restarts happen in the first half; the second half keeps one
daemon, and its RSS and open fds at idle moments must stay flat (no leak).

Invariants (each breach is a line in `violations`):
- at most one SIGTERM per process per event, and none outside an event (plus a slack after a clear, while
  the daemon may not have heard of it yet);
- a drain's deadline, as the state file says, never moves later;
- a holder that ignores SIGTERM is SIGKILLed within 1 s of the deadline (or of the daemon's first READY
  after it, when the daemon was down at the deadline);
- no drain lost: an event that outlives its deadline is marked drained, whatever crashed in between;
- the daemon exits only when told to; at the end, with every event cleared, the state file holds no event,
  no drain, and no temporary file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from watchdog.fake.server import FakeMetadataServer, Fault

PREEMPTED = "instance/preempted"
MAINTENANCE = "instance/maintenance-event"
UPCOMING = "instance/upcoming-maintenance"
GRACE = {"preempted": 3.0, "maintenance": 4.0}
SOURCES = {"preempted": "preempted", "maintenance": "maintenance-event"}  # the state file's names
CLEAR_SLACK = 6.0  # s after a clear in which a SIGTERM may still go out (faults can delay hearing of it)
KILL_TOLERANCE = 1.0  # the issue's ±1 s
MAX_HOLDERS = 8
HOLDER = r"""
import os, signal, sys, time
mode, device, log = sys.argv[1], sys.argv[2], sys.argv[3]
dev = os.open(device, os.O_RDONLY)
out = os.open(log, os.O_WRONLY | os.O_APPEND)
def term(*_):
    os.write(out, f"{os.getpid()} {time.time():.6f}\n".encode())
    if mode == "handled":
        os._exit(0)
    if mode == "release":
        os.close(dev)
signal.signal(signal.SIGTERM, term)
while True:
    signal.pause()
"""


@dataclass
class Episode:
    source: str
    started: float
    cleared: float | None = None
    deadline: float | None = None  # the first deadline the state file showed
    terms: dict[int, int] = field(default_factory=dict)


@dataclass
class Holder:
    popen: subprocess.Popen[bytes]
    mode: str
    born: float
    died: float | None = None
    culled: bool = False  # killed by the driver, not by the daemon


@dataclass
class Result:
    seconds: float
    seed: int
    events: int = 0
    sigterms: int = 0
    sigkills_seen: int = 0
    faults: int = 0
    crashes: int = 0
    graceful_restarts: int = 0
    holders: int = 0
    rss_kib: list[int] = field(default_factory=list)  # idle samples of the long-lived second-half daemon
    fds: list[int] = field(default_factory=list)
    peak_rss_kib: int = 0
    kill_offsets_s: list[float] = field(default_factory=list)  # each SIGKILL's time minus its due time
    violations: list[str] = field(default_factory=list)


class Soak:
    def __init__(self, seconds: float, seed: int, work: Path) -> None:
        self.rng = random.Random(seed)
        self.result = Result(seconds, seed)
        self.seconds = seconds
        self.work = work
        self.device = work / "accel0"
        os.mknod(self.device, stat.S_IFCHR | 0o600, os.makedev(1, 7))
        self.termlog = work / "terms.log"
        self.termlog.touch()
        self.state = work / "state"
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(str(work / "notify"))
        self.notify.setblocking(False)
        self.fake = FakeMetadataServer().start()
        self.holders: list[Holder] = []
        self.episodes: list[Episode] = []
        self.daemon: subprocess.Popen[bytes] | None = None
        self.downs: list[list[float | None]] = []  # [down, up] intervals of the daemon (up: its READY)
        self._log_offset = 0
        (work / "config.toml").write_text(
            f"[drain]\nmaintenance_grace = {GRACE['maintenance']}\npreemption_grace = {GRACE['preempted']}\n"
        )

    # -- the daemon ---------------------------------------------------------------------------------------
    def start_daemon(self) -> None:
        if not self.downs or self.downs[-1][1] is not None:
            self.downs.append([time.time(), None])
        env = dict(os.environ, NOTIFY_SOCKET=str(self.work / "notify"))
        with open(self.work / "daemon.log", "ab") as log:
            self.daemon = subprocess.Popen(
                [sys.executable, "-m", "watchdog", "run", "--config", str(self.work / "config.toml"),
                 "--metadata-host", self.fake.address, "--device", str(self.device),
                 "--state-dir", str(self.state), "--listen", "127.0.0.1:0", "--metadata-timeout-sec", "2"],
                env=env, stderr=log, stdout=subprocess.DEVNULL,
            )  # fmt: skip

    def crash(self, graceful: bool) -> None:
        assert self.daemon is not None
        self.daemon.send_signal(signal.SIGTERM if graceful else signal.SIGKILL)
        limit = time.monotonic() + 20
        while self.daemon.poll() is None:  # keep observing: a graceful stop takes a second or two, and a
            self.observe()  # death noticed only afterwards would be timed late and put on the wrong event
            if time.monotonic() > limit:
                self.violation("the daemon did not stop within 20 s")
                self.daemon.kill()
            time.sleep(0.02)
        code = self.daemon.returncode
        if graceful and code != 0:
            self.violation(f"graceful stop exited {code}")
        self.start_daemon()

    # -- holders ------------------------------------------------------------------------------------------
    def spawn(self) -> None:
        mode = self.rng.choice(["handled", "report", "release", "report"])
        popen = subprocess.Popen([sys.executable, "-c", HOLDER, mode, str(self.device), str(self.termlog)])
        self.holders.append(Holder(popen, mode, time.time()))
        self.result.holders += 1

    # -- events -------------------------------------------------------------------------------------------
    def current(self) -> Episode | None:
        last = self.episodes[-1] if self.episodes else None
        return last if last is not None and last.cleared is None else None

    def start_event(self) -> None:
        source = self.rng.choice(["preempted", "maintenance"])
        if source == "preempted":
            self.fake.set(PREEMPTED, "TRUE")
        else:
            self.fake.set(MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE")
        self.episodes.append(Episode(source, time.time()))
        self.result.events += 1

    def clear_event(self, episode: Episode) -> None:
        self.fake.set(PREEMPTED, "FALSE")
        self.fake.set(MAINTENANCE, "NONE")
        episode.cleared = time.time()

    def inject_fault(self) -> None:
        kind = self.rng.choice(
            ["status", "reset", "delay", "trickle", "garbage", "oversized", "no_flavor", "etag"]
        )
        path = self.rng.choice([None, PREEMPTED, MAINTENANCE, UPCOMING])
        status = self.rng.choice([500, 503, 429, 403, 404])
        seconds = self.rng.uniform(0.5, 3.0)
        self.fake.add_fault(Fault(kind, self.rng.randint(1, 5), status=status, seconds=seconds, path=path))
        self.result.faults += 1

    # -- observing ----------------------------------------------------------------------------------------
    def violation(self, text: str) -> None:
        self.result.violations.append(f"t+{time.time() - self.t0:.1f} s: {text}")

    def read_notify(self) -> None:
        while True:
            try:
                message = self.notify.recv(4096).decode()
            except BlockingIOError:
                return
            if "READY=1" in message and self.downs and self.downs[-1][1] is None:
                self.downs[-1][1] = time.time()

    def read_terms(self) -> None:
        with open(self.termlog, "rb") as log:
            log.seek(self._log_offset)
            data = log.read()
        complete = data[: data.rfind(b"\n") + 1]
        self._log_offset += len(complete)
        for line in complete.decode().splitlines():
            pid_text, at_text = line.split()
            pid, at = int(pid_text), float(at_text)
            self.result.sigterms += 1
            episode = next(
                (e for e in reversed(self.episodes)
                 if e.started <= at and (e.cleared is None or at <= e.cleared + CLEAR_SLACK)),
                None,
            )  # fmt: skip
            if episode is None:
                self.violation(f"SIGTERM to pid {pid} outside any event")
                continue
            episode.terms[pid] = episode.terms.get(pid, 0) + 1
            if episode.terms[pid] == 2:
                self.violation(f"second SIGTERM to pid {pid} in the {self.name(episode)}")

    def read_state(self) -> dict[str, object] | None:
        with contextlib.suppress(OSError, ValueError):
            data = json.loads((self.state / "state.json").read_text())
            return data if isinstance(data, dict) else None
        return None

    def events_of(self, episode: Episode, state: dict[str, object]) -> list[dict[str, object]]:
        """The state file's record of this episode's event: same source, first seen after it was set. An
        older event of another source may still be on file while the daemon has not heard its clear: it
        is not this episode's. An older one of the same source is, to the daemon: it never saw the value
        go back (faults hid the clear), so the old event, its drain and its deadline go on."""
        listed = state.get("events")
        events = [e for e in (listed if isinstance(listed, list) else []) if isinstance(e, dict)]
        same = [e for e in events if e.get("source") == SOURCES[episode.source]]
        fresh = [e for e in same if float(e.get("first_seen") or 0) >= episode.started - 0.5]
        return fresh or same

    def check_deadline(self) -> None:
        episode, state = self.current(), self.read_state()
        if episode is None or state is None:
            return
        deadlines = [float(e["deadline"]) for e in self.events_of(episode, state) if e.get("deadline")]  # type: ignore[arg-type]
        if not deadlines:
            return
        deadline = min(deadlines)
        if episode.deadline is None:
            episode.deadline = deadline
        elif deadline > episode.deadline + 1e-6:
            self.violation(f"deadline moved later: {episode.deadline:.3f} -> {deadline:.3f}")

    def reap_holders(self) -> None:
        for holder in self.holders:
            if holder.died is None and holder.popen.poll() is not None:
                holder.died = time.time()
                if holder.popen.returncode == -signal.SIGKILL and not holder.culled:
                    self.result.sigkills_seen += 1
                    self.check_kill(holder)

    def check_kill(self, holder: Holder) -> None:
        """SIGKILL within 1 s of the deadline; if the daemon was down then, within 1 s of its next READY."""
        assert holder.died is not None
        episode = next((e for e in reversed(self.episodes) if e.started <= holder.died), None)
        if episode is None or episode.deadline is None:
            self.violation(f"SIGKILL of pid {holder.popen.pid} with no event deadline known")
            return
        # One that opened the device after the deadline is killed when the daemon's next scan (1 s) finds it.
        due = max(episode.deadline, holder.born + 1.0)
        for down, up in self.downs:
            if down <= due and (up is None or due < up):
                due = up if up is not None else holder.died
        self.result.kill_offsets_s.append(round(holder.died - due, 3))
        if not due - KILL_TOLERANCE <= holder.died <= due + KILL_TOLERANCE:
            self.violation(
                f"SIGKILL of pid {holder.popen.pid} at {holder.died - due:+.2f} s from its deadline"
            )

    def name(self, episode: Episode) -> str:
        return f"{episode.source} event of t+{episode.started - self.t0:.1f} s"

    def check_drained(self, episode: Episode) -> None:
        """Before clearing an event that outlived its deadline: it is marked drained (no drain lost)."""
        events = self.events_of(episode, self.read_state() or {})
        if episode.deadline is None:
            self.violation(
                f"the {episode.source} event of t+{episode.started - self.t0:.1f} never started a drain"
            )
        elif not any(e.get("drained") for e in events):
            self.violation(f"the {self.name(episode)} outlived its deadline undrained")

    def sample(self, second_half: bool) -> None:
        if self.daemon is None or self.daemon.poll() is not None:
            return
        pid = self.daemon.pid
        with contextlib.suppress(OSError):
            status = Path(f"/proc/{pid}/status").read_text()
            rss = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
            fds = len(os.listdir(f"/proc/{pid}/fd"))
            self.result.peak_rss_kib = max(self.result.peak_rss_kib, rss)
            state = self.read_state() or {}
            if second_half and self.current() is None and not state.get("drain"):  # idle: no drain pending
                self.result.rss_kib.append(rss)
                self.result.fds.append(fds)

    def observe(self) -> None:
        """One look at everything: READYs, SIGTERMs received, the deadline on file, holders that died."""
        self.read_notify()
        self.read_terms()
        self.check_deadline()
        self.reap_holders()

    # -- the run ------------------------------------------------------------------------------------------
    def run(self) -> Result:
        self.t0 = time.time()
        self.start_daemon()
        end = self.t0 + self.seconds
        next_action = self.t0 + 2.0
        next_sample = self.t0
        # At least one kill -9 and one graceful restart, whatever the dice say (both in the first half).
        forced = [(self.t0 + self.seconds * 0.2, False), (self.t0 + self.seconds * 0.35, True)]
        while time.time() < end:
            now = time.time()
            second_half = now - self.t0 > self.seconds / 2
            self.observe()
            if self.daemon is not None and self.daemon.poll() is not None:
                self.violation(f"the daemon exited by itself with {self.daemon.returncode}")
                self.start_daemon()
            if now >= next_sample:
                self.sample(second_half)
                next_sample = now + 1.0
            if forced and now >= forced[0][0]:
                graceful = forced.pop(0)[1]
                self.result.graceful_restarts += graceful
                self.result.crashes += not graceful
                self.crash(graceful)
            if now >= next_action:
                self.act(now, second_half)
                next_action = now + self.rng.uniform(0.3, 1.5)
            time.sleep(0.05)  # the driver's polling period; nothing is synchronised on it
        self.finish()
        return self.result

    def act(self, now: float, second_half: bool) -> None:
        episode = self.current()
        roll = self.rng.random()
        if episode is not None and episode.deadline is not None and now > episode.deadline + 2.0:
            self.check_drained(episode)
            self.clear_event(episode)
        elif episode is not None and roll < 0.08:
            self.clear_event(episode)  # cleared early: the drain is cancelled
        elif (
            episode is None
            and roll < 0.25
            and (not self.episodes or now > (self.episodes[-1].cleared or 0) + CLEAR_SLACK)
        ):
            self.start_event()
        elif roll < 0.55 and sum(h.died is None for h in self.holders) < MAX_HOLDERS:
            self.spawn()
        elif roll < 0.75:
            self.inject_fault()
        elif roll < 0.85 and not second_half:
            self.result.crashes += 1
            self.crash(graceful=False)
        elif roll < 0.9 and not second_half:
            self.result.graceful_restarts += 1
            self.crash(graceful=True)
        elif roll < 0.95:
            self.cull()

    def cull(self) -> None:
        """Released holders keep running after their SIGTERM: end one now and then (outside any event)."""
        if self.current() is not None:
            return
        for holder in self.holders:
            if holder.died is None and holder.mode == "release":
                holder.culled = True
                holder.popen.kill()
                holder.popen.wait()
                holder.died = time.time()
                return

    def finish(self) -> None:
        episode = self.current()
        if episode is not None:
            self.clear_event(episode)
        self.fake.faults.clear()
        deadline = time.time() + 30
        while time.time() < deadline:
            self.read_terms()
            state = self.read_state()
            if state and not state.get("events") and not state.get("drain"):
                break
            time.sleep(0.1)
        else:
            self.violation(f"state not clean 30 s after the last clear: {self.read_state()}")
        leftovers = [p.name for p in self.state.iterdir() if p.name.endswith(".tmp")]
        if leftovers:
            self.violation(f"temporary files left in the state dir: {leftovers}")
        if self.daemon is not None:
            if self.daemon.poll() is not None:
                self.violation(f"the daemon exited by itself with {self.daemon.returncode}")
            self.daemon.send_signal(signal.SIGTERM)
            if self.daemon.wait(timeout=20) != 0:
                self.violation(f"the daemon's final stop exited {self.daemon.returncode}")
        for holder in self.holders:
            if holder.popen.poll() is None:
                holder.popen.kill()
            holder.popen.wait()
        self.fake.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_S", "600")))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", help="write the result as JSON here (default: stdout)")
    args = parser.parse_args(argv)
    if os.getpid() != 1:  # not yet in a PID namespace of our own: re-execute inside one
        unshare = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
        given = sys.argv[1:] if argv is None else argv
        return subprocess.call([*unshare, sys.executable, "-m", "bench.soak", *given])
    work = Path(tempfile.mkdtemp(prefix="tpu-watchdog-soak-"))
    try:
        result = Soak(args.seconds, args.seed, work).run()
    finally:
        log = work / "daemon.log"
        if log.exists():
            shutil.copy(log, Path(tempfile.gettempdir()) / "tpu-watchdog-soak-daemon.log")
        shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(asdict(result))
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text + "\n")
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main())
