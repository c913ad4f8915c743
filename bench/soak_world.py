"""The soak's world: one daemon run at a time, the holders, the fake metadata server, and what the driver
sees of them (the holders' log, deaths, the state file), each fact recorded in `Facts` as it is seen.
`bench/soak.py` draws the episodes; `bench/soak_checker.py` judges the facts."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import sys
import time
from pathlib import Path

from bench.soak_facts import (
    KEYS,
    ON,
    Episode,
    Facts,
    HolderFacts,
    Instance,
    Result,
    Served,
    read_holder_lines,
)
from bench.soak_procs import HOLDER, Notifications, Reaper, json_logs_supported
from tests.support.workloads import UniqueDevice
from watchdog.fake.server import FakeMetadataServer, Fault

UPCOMING = "instance/upcoming-maintenance"
GRACE = {"preempted": 3.0, "maintenance": 4.0}
SOURCES = {"preempted": "preempted", "maintenance": "maintenance-event"}  # the state file's names
STOP_WAIT = 20.0  # s a daemon (or a holder) has to die once told
NICE = shutil.which("nice") or "/usr/bin/nice"  # coreutils
# The fake's request log keeps every answer of a long soak (a few a second): the checker's ground truth.
REQUEST_LOG = 2_000_000


class World:
    def __init__(self, seconds: float, seed: int, work: Path, load: bool) -> None:
        self.rng = random.Random(seed)
        self.result = Result(seconds, seed, load=load)
        self.seconds, self.work = seconds, work
        self.device = UniqueDevice(work)
        self.holder_log = work / "holders.log"
        self.holder_log.touch()
        self.state = work / "state"
        self.json_logs = json_logs_supported()  # before the reaper: it would reap this child too
        self.result.log_format = "json" if self.json_logs else "text"
        self.reaper = Reaper()
        self.notify = Notifications(work / "notify")
        self.fake = FakeMetadataServer(log_capacity=REQUEST_LOG).start()
        self.facts = Facts(t0=time.time())
        self.by_serial: dict[int, HolderFacts] = {}
        self.daemon: Instance | None = None
        self.late: dict[int, float] = {}  # episode index -> when its late arrival came
        self.busy: list[int] = []
        self._log_offset = 0
        (work / "config.toml").write_text(
            f"[drain]\nmaintenance_grace = {GRACE['maintenance']}\npreemption_grace = {GRACE['preempted']}\n"
        )

    def say(self, text: str) -> None:
        self.facts.actions.append((time.time(), text))

    # -- the daemon ---------------------------------------------------------------------------------------
    def start_daemon(self) -> None:
        index = len(self.facts.instances) + 1
        log = self.work / f"daemon-{index}.log"
        # At the unit's priority (systemd/tpu-watchdog.service: Nice=-10), as it runs on a TPU VM.
        argv = [NICE, "-n", "-10", sys.executable, "-m", "watchdog", "run",
                "--config", str(self.work / "config.toml"), "--metadata-host", self.fake.address,
                "--device", str(self.device.path),
                "--state-dir", str(self.state), "--listen", "127.0.0.1:0", "--metadata-timeout-sec", "2",
                *(["--log-format", "json"] if self.json_logs else [])]  # fmt: skip
        env = dict(os.environ, NOTIFY_SOCKET=str(self.work / "notify"))
        started = time.time()
        pid = self.reaper.spawn(("daemon", index), argv, stderr=log, env=env)
        self.daemon = Instance(index, pid, started, log)
        self.facts.instances.append(self.daemon)
        self.say(f"started daemon #{index} (pid {pid})")

    def ready(self) -> bool:
        """The current daemon has said READY=1."""
        daemon = self.daemon
        return daemon is not None and any(t >= daemon.started for t in self.notify.ready.get(daemon.pid, []))

    def daemon_gone(self) -> tuple[float, int] | None:
        return None if self.daemon is None else self.reaper.death(("daemon", self.daemon.index))

    def end_daemon(self, told: str) -> None:
        """Stop (SIGTERM) or kill -9 the daemon and wait for its death; the reaper times it."""
        daemon = self.daemon
        assert daemon is not None
        daemon.told, daemon.told_at = told, time.time()
        self.say(f"{'kill -9' if told == 'kill' else 'SIGTERM'} to daemon #{daemon.index}")
        self.reaper.kill(("daemon", daemon.index), signal.SIGKILL if told == "kill" else signal.SIGTERM)
        death = self.reaper.wait(("daemon", daemon.index), STOP_WAIT)
        if death is None:
            daemon.stop_timed_out = True
            self.reaper.kill(("daemon", daemon.index), signal.SIGKILL)
            death = self.reaper.wait(("daemon", daemon.index), STOP_WAIT)
        if death is not None:
            daemon.ended, daemon.exit_code = death
            self.say(f"daemon #{daemon.index} reaped: exit {daemon.exit_code}")

    def restart(self, graceful: bool) -> None:
        self.result.graceful_restarts += graceful
        self.result.crashes += not graceful
        self.end_daemon("stop" if graceful else "kill")
        self.start_daemon()

    # -- holders ------------------------------------------------------------------------------------------
    def spawn(self, mode: str | None = None, late: bool = False, after_clear: bool = False) -> HolderFacts:
        mode = mode or self.rng.choice(["handled", "report", "release", "report"])
        serial = len(self.facts.holders) + 1
        argv = [sys.executable, "-c", HOLDER, str(serial), mode, str(self.device.path), str(self.holder_log)]
        holder = HolderFacts(serial, 0, mode, time.time(), late=late, after_clear=after_clear)
        holder.pid = self.reaper.spawn(("holder", serial), argv)
        self.facts.holders.append(holder)
        self.by_serial[serial] = holder
        self.result.holders += 1
        why = " (late arrival)" if late else " (new job while the daemon is down)" if after_clear else ""
        self.say(f"spawned holder #{serial} pid {holder.pid} ({mode}){why}")
        return holder

    def wait_opened(self, holder: HolderFacts, timeout: float = 10.0) -> None:
        limit = time.monotonic() + timeout
        while holder.opened is None and time.monotonic() < limit:
            self.read_holder_log()
            time.sleep(0.01)  # polling the holders' log for a condition, with a deadline

    def kill_holder(self, holder: HolderFacts) -> None:
        holder.culled = True
        self.reaper.kill(("holder", holder.serial), signal.SIGKILL)
        self.reaper.wait(("holder", holder.serial), STOP_WAIT)
        self.reap()

    def holding(self) -> list[HolderFacts]:
        return [h for h in self.facts.holders if h.stopped_holding is None]

    # -- events -------------------------------------------------------------------------------------------
    def current(self) -> Episode | None:
        last = self.facts.episodes[-1] if self.facts.episodes else None
        return last if last is not None and last.cleared is None else None

    def start_event(self) -> None:
        source = self.rng.choice(["preempted", "maintenance"])
        episode = Episode(len(self.facts.episodes) + 1, source, time.time(), GRACE[source])
        self.fake.set(KEYS[source], ON[source])
        self.facts.episodes.append(episode)
        self.result.events += 1
        self.say(f"set {KEYS[source]} = {ON[source]} (event #{episode.index})")

    def clear_event(self, episode: Episode, while_down: bool = False) -> None:
        self.fake.set(KEYS["preempted"], "FALSE")
        self.fake.set(KEYS["maintenance"], "NONE")
        episode.cleared, episode.cleared_while_down = time.time(), while_down
        self.say(f"cleared event #{episode.index}" + (" while no daemon runs" if while_down else ""))

    def inject_fault(self) -> None:
        kind = self.rng.choice(
            ["status", "reset", "delay", "trickle", "garbage", "oversized", "no_flavor", "etag"]
        )
        path = self.rng.choice([None, KEYS["preempted"], KEYS["maintenance"], UPCOMING])
        status = self.rng.choice([500, 503, 429, 403, 404])
        fault = Fault(
            kind, self.rng.randint(1, 5), status=status, seconds=self.rng.uniform(0.5, 3.0), path=path
        )
        self.fake.add_fault(fault)
        self.result.faults += 1
        self.say(f"fault {kind} x{fault.count} on {path or 'every key'} ({status}, {fault.seconds:.1f} s)")

    # -- observing ----------------------------------------------------------------------------------------
    def read_holder_log(self) -> None:
        with open(self.holder_log, "rb") as log:
            log.seek(self._log_offset)
            data = log.read()
        complete = data[: data.rfind(b"\n") + 1]
        self._log_offset += len(complete)
        read_holder_lines(complete, self.by_serial)

    def reap(self) -> None:
        for holder in self.facts.holders:
            death = self.reaper.death(("holder", holder.serial)) if holder.died is None else None
            if death is not None:
                holder.died, holder.exit_code = death

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
        before = self.facts.episodes[episode.index - 2] if episode.index > 1 else None
        if before and before.cleared and self.daemon and self.daemon.started > before.cleared:
            return fresh  # this daemon started after that clear: an older event on file is stale, not missed
        return fresh or same

    def check_state(self) -> None:
        """The deadline on file for the current event: the driver paces its episodes by it."""
        state = self.read_state()
        if state is None:
            return
        # The last event, cleared or not: until the daemon hears the clear, its event (and deadline) is
        # still on file, and its drain may still SIGKILL by it. The next event waits for that (gap_over).
        episode = self.facts.episodes[-1] if self.facts.episodes else None
        if episode is None:
            return
        deadlines = [float(str(e["deadline"])) for e in self.events_of(episode, state) if e.get("deadline")]
        if deadlines and (not episode.deadlines or abs(min(deadlines) - episode.deadlines[-1][1]) > 1e-6):
            episode.deadlines.append((time.time(), min(deadlines)))
            self.say(f"state file: event #{episode.index} deadline t+{min(deadlines) - self.facts.t0:.3f}")

    def collect_served(self) -> None:
        """What the fake answered to requests for the event keys: the checker's record of what each daemon
        was told, and when."""
        records = self.fake.requests()
        self.facts.served_complete = len(records) < REQUEST_LOG
        self.facts.served = [Served(r.time, r.answered or r.time, r.path, r.status, r.value, r.note)
                             for r in records if r.path in KEYS.values()]  # fmt: skip

    def observe(self) -> None:
        self.read_holder_log()
        self.reap()
        self.check_state()
        death = self.daemon_gone()
        if self.daemon is not None and death is not None and self.daemon.told is None:
            self.daemon.ended, self.daemon.exit_code = death
            self.say(f"daemon #{self.daemon.index} exited by itself: {self.daemon.exit_code}")
            self.start_daemon()

    def sample(self, second_half: bool) -> None:
        if self.daemon is None or self.daemon_gone() is not None:
            return
        with contextlib.suppress(OSError, StopIteration):
            status = Path(f"/proc/{self.daemon.pid}/status").read_text()
            rss = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
            fds = len(os.listdir(f"/proc/{self.daemon.pid}/fd"))
            self.result.peak_rss_kib = max(self.result.peak_rss_kib, rss)
            if second_half and self.current() is None and not (self.read_state() or {}).get("drain"):
                self.result.rss_kib.append(rss)  # idle: no event, no drain pending
                self.result.fds.append(fds)
