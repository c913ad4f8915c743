"""One seeded crash-restart scenario: `kill -9` of a real `tpu-watchdog run` at random points of a real drain,
restarts on the same state dir, and the product's invariants checked at the receiving end.

    result = run_scenario(seed, workdir)   # -> Result(plan, facts, violations); result.report()

`make_plan(seed)` draws everything from `random.Random(seed)`: the event (maintenance or preemption), the
grace (2-4 s), the holders (handled, slow, ignore, release; each says "term" on its pipe for every SIGTERM
it gets), 1-3 crash points in time order (POINTS), how long the daemon stays dead after each, and sometimes
a second kill while it restarts (a crash loop). `driver_main` runs the plan as init of a private PID
namespace (`unshare --pid --fork --mount-proc --kill-child`): the fake metadata server, the holders and the
daemon are all in there, so the daemon can see and signal nothing else, and the holders are the driver's
children, whose deaths it times with waitpid. It writes what happened (`facts`: every line each holder
said, when it died and how, each distinct state file seen, each daemon run's start and kill, the state dir
at the end); `check` turns plan + facts into violations:

- each holder got at most one SIGTERM for the event (counted by the holder), and none got none unless a crash
  left an unconfirmed SIGTERM intent for it in the state file (write-ahead: then "possibly sent");
- the drain's deadline (state.json `drain.deadline_at`, each event's `deadline`) never moves later, and the
  event is drained once (one `started_at`);
- a holder that ignores SIGTERM dies of SIGKILL within +-1 s of the original deadline; if no daemon was up at
  the deadline, within 1 s of the first one back (a dead daemon cannot kill anything);
- a holder that exits on SIGTERM is never SIGKILLed, a holder that released the device is left alone;
- no drain lost: after the last restart the drain finishes (last_outcome), every holder gone or released;
- no orphaned state: once the event cleared, state.json has no events, no drain, no signals, no outcome, and
  the state dir holds nothing but state.json (no `.state.json.*.tmp`, nothing set aside as corrupt);
- no daemon logged a traceback or an internal error; the last one stops cleanly (exit 0).

The state file is read every 20 ms, so a state that lasted less may go unseen.
tests/system/test_crash_restart.py runs a few seeds; a soak benchmark can run
thousands (`run_scenario` over `range(N)`, count `violations`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.waiting import wait_for
from watchdog.daemon.runner import RESCAN_INTERVAL

REPO = Path(__file__).resolve().parents[2]
POINTS = (
    "before_event",  # killed while idle; the event is set while it is dead
    "after_set",  # a moment after the event is set (before or after its SIGTERMs)
    "after_terms",  # once some holders said "term"
    "during_wait",  # somewhere between the SIGTERMs and the deadline
    "before_deadline",  # just before the deadline
    "after_deadline",  # during the escalation (SIGKILL going out, the kill wait)
    "after_clear",  # the drain finished, the event went back to normal, the daemon died before noticing
)
MODES = ("handled", "slow", "ignore", "release")
SLACK = 1.0  # the product's rule: SIGKILL within +-1 s of the deadline
KEYS = {
    "maintenance-event": ("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE", "NONE"),
    "preempted": ("instance/preempted", "TRUE", "FALSE"),
}

# A holder: opens the device, says "ready PID", then "term" for every SIGTERM it gets, and behaves by mode:
# handled exits 0 at once; slow exits 0 `delay` s after the first SIGTERM; ignore carries on (needs SIGKILL);
# release closes the device on the first SIGTERM ("released") and carries on.
HOLDER = r"""
import os, signal, sys
mode, device, out, delay = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
dev = os.open(device, os.O_PATH)
termed = []
def say(text):
    os.write(out, (text + "\n").encode())
def on_term(*_):
    say("term")
    if mode == "handled":
        os._exit(0)
    if termed:
        return
    termed.append(1)
    if mode == "slow":
        signal.setitimer(signal.ITIMER_REAL, delay)
    elif mode == "release":
        os.close(dev)
        say("released")
signal.signal(signal.SIGALRM, lambda *_: os._exit(0))
signal.signal(signal.SIGTERM, on_term)
say(f"ready {os.getpid()}")
while True:
    signal.pause()
"""


# -- the plan (pure) ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class HolderPlan:
    mode: str
    delay: float = 0.0  # slow: seconds from its first SIGTERM to its exit


@dataclasses.dataclass(frozen=True)
class CrashPlan:
    point: str  # one of POINTS
    offset: float  # seconds: after the point's moment, or before the deadline (during_wait, before_deadline)
    down: float  # seconds the daemon stays dead before the restart
    terms: int = 0  # after_terms: how many "term"s (all holders together) to wait for
    again: float | None = None  # a crash loop: the restart is killed again this long after its launch


@dataclasses.dataclass(frozen=True)
class Plan:
    seed: int
    source: str  # maintenance-event | preempted
    grace: float
    holders: tuple[HolderPlan, ...]
    crashes: tuple[CrashPlan, ...]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        return cls(
            int(data["seed"]),
            str(data["source"]),
            float(data["grace"]),
            tuple(HolderPlan(**h) for h in data["holders"]),
            tuple(CrashPlan(**c) for c in data["crashes"]),
        )

    def describe(self) -> str:
        holders = ", ".join(h.mode + (f"({h.delay:.1f}s)" if h.mode == "slow" else "") for h in self.holders)
        crashes = "; ".join(
            f"{c.point} offset {c.offset:.2f}s down {c.down:.2f}s"
            + (f" terms {c.terms}" if c.terms else "")
            + (f" killed again {c.again:.2f}s after the restart" if c.again is not None else "")
            for c in self.crashes
        )
        head = f"seed {self.seed}: {self.source}, grace {self.grace:.1f} s"
        return f"{head}, holders [{holders}], crashes [{crashes}]"


def make_plan(seed: int) -> Plan:
    """Everything a scenario does, from `seed`. Consecutive seeds cycle the first crash point through POINTS,
    so a handful of seeds already covers every point once."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible test plan, not cryptography
    grace = round(rng.uniform(2.0, 4.0), 1)
    count = rng.randint(1, 4)
    modes = ["ignore"] if rng.random() < 0.75 else []  # most scenarios need a SIGKILL on time
    modes += [rng.choice(MODES) for _ in range(count - len(modes))]
    rng.shuffle(modes)
    holders = tuple(
        HolderPlan(m, round(rng.uniform(0.3, grace + 1.0), 2) if m == "slow" else 0.0) for m in modes
    )
    first = POINTS[seed % len(POINTS)]
    chosen = {first, *rng.sample(POINTS, rng.randint(0, 2))}
    crashes = []
    for point in (p for p in POINTS if p in chosen):
        if point == "during_wait":
            offset = rng.uniform(0.3, grace - 0.3)
        elif point == "before_deadline":
            offset = rng.uniform(0.02, 0.4)
        elif point == "after_deadline":
            offset = rng.uniform(0.0, 0.3)
        else:
            offset = rng.uniform(0.0, 0.4)
        terms = rng.randint(1, len(holders)) if point == "after_terms" else 0
        again = round(rng.uniform(0.05, 0.6), 3) if rng.random() < 0.25 else None
        crashes.append(CrashPlan(point, round(offset, 3), round(rng.uniform(0.0, 0.6), 3), terms, again))
    return Plan(seed, rng.choice(sorted(KEYS)), grace, holders, tuple(crashes))


# -- running one scenario (outside the namespace) --------------------------------------------------------


@dataclasses.dataclass
class Result:
    plan: Plan
    facts: dict[str, Any]
    violations: list[str]
    workdir: Path

    def report(self) -> str:
        """The seed, the plan, every violation, where the logs are: enough to replay and read a failure."""
        lines = [self.plan.describe(), *(f"  VIOLATION: {v}" for v in self.violations)]
        lines.append(
            f"  replay: CRASH_SEEDS={self.plan.seed} .venv/bin/pytest tests/system/test_crash_restart.py"
        )
        lines.append(f"  facts and daemon logs in {self.workdir}")
        for run in self.facts.get("runs", []):
            lines.append(f"  run {run['index']}: {json.dumps({k: v for k, v in run.items() if k != 'log'})}")
        tail = self.facts.get("runs", [{}])[-1].get("log", "") if self.facts.get("runs") else ""
        if tail:
            lines.append("  last daemon log (tail):\n" + "\n".join(tail.splitlines()[-25:]))
        if self.facts.get("driver_output"):
            lines.append("  driver output (tail):\n" + self.facts["driver_output"][-3000:])
        return "\n".join(lines)


def namespace_command() -> list[str]:
    """The private PID namespace every daemon of a scenario runs in; --kill-child: if the runner dies or
    times out, the namespace's init dies, and the kernel kills everything in it."""
    return ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]


def run_scenario(seed: int, workdir: Path, plan: Plan | None = None, timeout: float = 150.0) -> Result:
    """Run ONE scenario (the plan of `seed` unless given) in a private PID namespace; check its facts."""
    plan = plan or make_plan(seed)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "plan.json").write_text(json.dumps(plan.to_json()))
    facts_path = workdir / "facts.json"
    try:
        done = subprocess.run(
            [*namespace_command(), sys.executable, "-m", "tests.support.crash_scenario", str(workdir)],
            capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        output = done.stdout + done.stderr
        status: int | None = done.returncode
    except subprocess.TimeoutExpired as expired:
        output = f"the driver did not finish within {timeout} s: {expired}"
        status = None
    facts: dict[str, Any] = json.loads(facts_path.read_text()) if facts_path.exists() else {}
    facts["driver_output"] = output
    violations = check(facts)
    if status != 0:
        violations.insert(0, f"the driver exited {status}")
    return Result(plan, facts, violations, workdir)


# -- the invariants (pure) -------------------------------------------------------------------------------


def deadlines(states: list[dict[str, Any]]) -> list[float]:
    """Every drain deadline seen in the state file, in order; a state with no drain (a drain that ended
    between two reads of the file) gives its events' deadline instead."""
    found: list[float] = []
    for state in states:
        if state["drain"]:
            found.append(state["drain"]["deadline_at"])
        else:
            found += [e["deadline"] for e in state["events"] if e["deadline"] is not None]
    return found


def latest_deadline(states: list[dict[str, Any]]) -> float | None:
    seen = deadlines(states)
    return seen[-1] if seen else None


def original_deadline(facts: dict[str, Any]) -> float | None:
    """The first deadline any daemon wrote to the state file."""
    seen = deadlines(facts.get("states", []))
    return seen[0] if seen else None


def kill_due(facts: dict[str, Any], deadline: float) -> float:
    """When the SIGKILL of a holder that ignores SIGTERM is due: the deadline, or, if no daemon was up then,
    the moment the first one was back (a run counts if it lived at least SLACK s past that moment)."""
    due = float("inf")
    for run in facts.get("runs", []):
        if run.get("started") is None:
            continue
        moment = max(deadline, run["started"])
        if run.get("killed") is None or run["killed"] > moment + SLACK:
            due = min(due, moment)
    return due


def term_owed(facts: dict[str, Any], deadline: float) -> bool:
    """True if some daemon run was up, with the event on, for SLACK s before the deadline: it owed every
    holder a SIGTERM. (A drain first resumed after its deadline goes straight to SIGKILL, by design.)"""
    event_set = facts.get("event_set") or 0.0
    for run in facts.get("runs", []):
        if run.get("started") is None:
            continue
        end = min(deadline, run["killed"] if run.get("killed") is not None else deadline)
        if end - max(run["started"], event_set) >= SLACK:
            return True
    return False


def is_crash_temp_file(name: str) -> bool:
    """A file a daemon killed mid-write leaves in the state dir: the temp file of a state write that was
    never renamed (`.state.json.XXXX.tmp`), or the write probe of its start-up (`.probe-XXXX`)."""
    return (name.startswith(".state.json.") and name.endswith(".tmp")) or name.startswith(".probe-")


def check(facts: dict[str, Any]) -> list[str]:
    """Every invariant the scenario's facts break, each a sentence naming the holder, times and values."""
    out: list[str] = [f"the driver failed: {e}" for e in facts.get("errors", [])]
    if not facts.get("holders"):
        return [*out, "no facts were recorded"]
    states: list[dict[str, Any]] = facts.get("states", [])
    deadline = original_deadline(facts)
    if deadline is None:
        out.append("no daemon ever wrote a drain or an event to the state file")
    else:
        later = [d for d in deadlines(states) if d > deadline]
        if later:
            out.append(f"the deadline moved later: {deadline:.3f} -> {later}")
    first_event_deadline: dict[str, float] = {}
    for state in states:
        for event in state["events"]:
            if event["deadline"] is None:
                continue
            first = first_event_deadline.setdefault(event["id"], event["deadline"])
            if event["deadline"] > first:
                out.append(
                    f"event {event['id']}: deadline moved later {first:.3f} -> {event['deadline']:.3f}"
                )
    # A late-arrival drain (a holder no run had signalled: after a restart, once the event is confirmed) is
    # the same event's drain going on, not a second drain of it.
    starts = sorted({s["drain"]["started_at"] for s in states if s["drain"] and not s["drain"].get("late")})
    if len(starts) > 1:
        out.append(f"the event was drained more than once: drains started at {starts}")
    excused = {pid for crash in facts.get("crashes", []) for pid in crash.get("unconfirmed_term", [])}
    if deadline is not None and not term_owed(facts, deadline):
        excused |= {h["pid"] for h in facts["holders"]}  # no daemon was up long enough before the deadline
    due = kill_due(facts, deadline) if deadline is not None else float("inf")
    for holder in facts["holders"]:
        out += _check_holder(holder, deadline, due, excused)
    final = facts.get("finished")
    if final is None:
        out.append("no drain finished after the last restart (drain lost)")
    elif final["outcome"] not in ("exited", "timed_out", "no_holders"):
        out.append(f"the drain finished {final['outcome']!r}, not exited/timed_out/no_holders")
    cleared = facts.get("cleared")
    if cleared is None:
        out.append("the state never went back to empty after the event cleared")
    else:
        leftover = {k: cleared[k] for k in ("events", "drain", "last_outcome", "signals") if cleared[k]}
        if leftover:
            out.append(f"orphaned state after the event cleared: {leftover}")
    stray = [name for name in facts.get("state_dir", []) if name != "state.json"]
    temps = [name for name in stray if is_crash_temp_file(name)]
    if temps:
        out.append(f"temp files of a write a crash interrupted were left in the state dir: {temps}")
    if set(stray) - set(temps):
        out.append(
            f"the state dir holds more than state.json after the event: {sorted(set(stray) - set(temps))}"
        )
    for run in facts.get("runs", []):
        if run.get("errors"):
            out.append(f"daemon run {run['index']} logged errors: {run['errors'][:3]}")
    if facts.get("stop_status") != 0:
        out.append(f"the last daemon did not stop cleanly: exit {facts.get('stop_status')}")
    return out


def _newcomer_wait(terms: list[float], due: float) -> float:
    """A holder whose SIGTERM a crash kept from going out is, to the restarted daemon, one nobody signalled:
    it is signalled (and, past the deadline, killed) at the late-arrival scan after the event is confirmed,
    up to RESCAN_INTERVAL after the daemon is up."""
    return RESCAN_INTERVAL if terms and min(terms) >= due - SLACK else 0.0


def _check_holder(holder: dict[str, Any], deadline: float | None, due: float, excused: set[int]) -> list[str]:
    out: list[str] = []
    name = f"holder {holder['pid']} ({holder['mode']})"
    terms: list[float] = holder["terms"]
    died, code = holder["died"], holder["returncode"]
    if len(terms) > 1:
        out.append(f"{name} got {len(terms)} SIGTERMs for one event (at {terms})")
    if not terms and holder["pid"] not in excused:
        out.append(f"{name} never got a SIGTERM, and no crash left an unconfirmed intent for it")
    killed = code == -signal.SIGKILL and not holder["killed_by_driver"]
    if holder["mode"] == "ignore" and deadline is not None:
        if not killed or died is None:
            out.append(f"{name} was not SIGKILLed by the daemon (exit {code})")
        elif not deadline - SLACK <= died <= due + SLACK + _newcomer_wait(terms, due):
            out.append(
                f"{name} SIGKILLed at {died:.3f}: {died - deadline:+.3f} s from the deadline {deadline:.3f}"
                + (f" (no daemon up until {due:.3f})" if due > deadline else "")
            )
    elif killed and deadline is not None and died is not None and died < deadline - SLACK:
        out.append(f"{name} SIGKILLed {deadline - died:.3f} s before the deadline")
    if holder["mode"] == "handled" and terms and code != 0:
        out.append(f"{name} got SIGTERM but ended with {code}, not its own exit 0")
    if holder["mode"] == "slow" and terms and deadline is not None:
        exits_at = terms[0] + holder["delay"]
        if exits_at < deadline - SLACK and code != 0:
            out.append(
                f"{name} would have exited at {exits_at:.3f}, before the deadline, but ended with {code}"
            )
    if holder["mode"] == "release" and holder["released"] is not None and not holder["alive_at_end"]:
        out.append(f"{name} released the device but was not left alone (exit {code})")
    gone = holder["released"] if holder["released"] is not None else died
    if gone is None:
        out.append(f"{name} still held the device after the drain (drain lost)")
    elif holder["mode"] != "ignore" and deadline is not None and gone > due + SLACK:  # ignore: checked above
        out.append(f"{name} still held the device {gone - due:.3f} s after the SIGKILL was due")
    return out


# -- inside the namespace: the driver --------------------------------------------------------------------


def wait_until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """`tests.support.waiting.wait_for`, failing with TimeoutError: in the driver a wait that runs out is a
    broken run to report, not a test assertion."""
    try:
        return wait_for(condition, timeout=timeout, what=what)
    except AssertionError as error:
        raise TimeoutError(str(error)) from None


def sleep_until(wall: float) -> None:
    """Wait for a planned moment of the scenario (a crash point): the plan's own timing, not a sync."""
    left = wall - time.time()
    if left > 0:
        time.sleep(left)


class Holder:
    """One holder process, a child of the driver: every line it says, timed; its death, timed by waitpid."""

    def __init__(self, plan: HolderPlan, device: Path) -> None:
        read_end, write_end = os.pipe()
        self.plan = plan
        self.popen = subprocess.Popen(
            [sys.executable, "-c", HOLDER, plan.mode, str(device), str(write_end), str(plan.delay)],
            pass_fds=(write_end,),
            stdin=subprocess.DEVNULL,
        )
        os.close(write_end)
        self.lines: list[tuple[float, str]] = []
        self.died: float | None = None
        self.killed_by_driver = False
        self._read_end = read_end
        self._threads = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._reap, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _read(self) -> None:
        buffer = b""
        while chunk := os.read(self._read_end, 4096):
            now = time.time()
            buffer += chunk
            while b"\n" in buffer:
                line, _, buffer = buffer.partition(b"\n")
                self.lines.append((now, line.decode()))
        os.close(self._read_end)

    def _reap(self) -> None:
        self.popen.wait()
        self.died = time.time()

    def said(self, word: str) -> list[float]:
        return [t for t, line in list(self.lines) if line.split(" ")[0] == word]

    @property
    def gone(self) -> bool:
        return self.died is not None or bool(self.said("released"))

    def close(self) -> None:
        if self.died is None:
            self.killed_by_driver = True
            self.popen.kill()
        for thread in self._threads:
            thread.join(timeout=10)

    def facts(self, alive_at_end: bool) -> dict[str, Any]:
        released = self.said("released")
        return {
            "pid": self.popen.pid,
            "mode": self.plan.mode,
            "delay": self.plan.delay,
            "terms": self.said("term"),
            "released": released[0] if released else None,
            "died": None if self.killed_by_driver else self.died,
            "returncode": self.popen.returncode,
            "killed_by_driver": self.killed_by_driver,
            "alive_at_end": alive_at_end,
        }


class DaemonRun:
    """One `tpu-watchdog run`, its stderr read line by line (timed) into a log file."""

    def __init__(self, index: int, argv: list[str], log_path: Path) -> None:
        self.index = index
        self.log_path = log_path
        self.launched = time.time()
        self.started: float | None = None  # when it said "tpu-watchdog started" (its drain resumed by then)
        self.killed: float | None = None
        self.errors: list[str] = []
        self.popen = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stderr is not None
        with open(self.log_path, "w", encoding="utf-8") as log:
            for raw in self.popen.stderr:
                line = raw.decode(errors="replace")
                log.write(f"{time.time():.3f} {line}")
                log.flush()
                if self.started is None and "tpu-watchdog started" in line:
                    self.started = time.time()
                if "Traceback" in line or "internal error" in line:
                    self.errors.append(line.strip())

    def kill(self) -> None:
        """kill -9: no handler runs, nothing is saved, the state file is whatever the last write left."""
        self.killed = time.time()
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=10)
        self._reader.join(timeout=10)

    def stop(self) -> int:
        self.popen.send_signal(signal.SIGTERM)
        status = self.popen.wait(timeout=20)
        self._reader.join(timeout=10)
        return status

    def facts(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "launched": self.launched,
            "started": self.started,
            "killed": self.killed,
            "returncode": self.popen.returncode,
            "errors": self.errors,
            "log": self.log_path.read_text(encoding="utf-8") if self.log_path.exists() else "",
        }


class StateWatch:
    """Reads state.json every 20 ms; keeps each distinct content (written_at aside), with when it was seen."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.states: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._last: Any = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def read(self) -> dict[str, Any] | None:
        """The state file now, in the shape the checks use (None: no file yet)."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        drain = data["drain"]
        state = {
            "events": [
                {"id": e["id"], "deadline": e["deadline"], "drained": e["drained"]} for e in data["events"]
            ],
            "drain": {
                "started_at": drain["started_at"],
                "deadline_at": drain["deadline_at"],
                "late": drain.get("late", False),
            }
            if drain
            else None,
            "last_outcome": data["last_outcome"],
            "signals": [
                {"pid": s["pid"], "signal": s["signal"], "confirmed": s["sent_at"] is not None}
                for s in data["signals"]
            ],
        }
        if state != self._last:
            self._last = state
            self.states.append({**state, "seen": time.time()})
        return state

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            try:
                self.read()
            except (ValueError, KeyError, TypeError) as error:  # never from an atomic write: a violation
                self.errors.append(f"state.json unreadable: {type(error).__name__}: {error}")

    def latest(self) -> dict[str, Any] | None:
        self.read()
        return self.states[-1] if self.states else None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class Driver:
    def __init__(self, workdir: Path, plan: Plan) -> None:
        from tests.support.workloads import (
            UniqueDevice,
        )  # numbers no other process holds; holders open it O_PATH

        self.workdir = workdir
        self.plan = plan
        self.node = UniqueDevice(workdir)
        self.device = self.node.path
        self.state_dir = workdir / "state"
        (workdir / "empty.toml").write_text("")
        self.key, self.on, self.off = KEYS[plan.source]
        self.runs: list[DaemonRun] = []
        self.crashes: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.event_set: float | None = None
        self.cleared_at: float | None = None
        self.finished: dict[str, Any] | None = None
        self.cleared: dict[str, Any] | None = None
        self.stop_status: int | None = None
        self.watch = StateWatch(self.state_dir / "state.json")
        self.holders: list[Holder] = []

    # -- the daemon --

    def start_daemon(self, metadata: str) -> DaemonRun:
        grace = f"{self.plan.grace}"
        argv = [
            sys.executable, "-m", "watchdog", "run", "--config", str(self.workdir / "empty.toml"),
            "--metadata-host", metadata, "--device", str(self.device), "--state-dir", str(self.state_dir),
            "--listen", "127.0.0.1:0", "--metadata-timeout-sec", "2", "--on-timeout", "kill",
            "--grace", grace, "--preempt-grace", grace,
        ]  # fmt: skip
        run = DaemonRun(len(self.runs), argv, self.workdir / f"daemon-{len(self.runs)}.log")
        self.runs.append(run)
        return run

    @property
    def daemon(self) -> DaemonRun:
        return self.runs[-1]

    def wait_started(self) -> None:
        run = self.daemon
        wait_until(
            lambda: run.started is not None or run.popen.poll() is not None,
            30,
            f"daemon run {run.index} to start",
        )
        if run.started is None:
            raise RuntimeError(f"daemon run {run.index} exited {run.popen.returncode} before starting")

    def kill(self, point: str) -> None:
        self.daemon.kill()
        left = self.watch.latest()  # what the crash left behind
        unconfirmed = [
            s["pid"]
            for s in (left or {}).get("signals", [])
            if s["signal"] == "SIGTERM" and not s["confirmed"]
        ]
        self.crashes.append(
            {
                "point": point,
                "at": self.daemon.killed,
                "run": self.daemon.index,
                "unconfirmed_term": unconfirmed,
            }
        )

    def crash(self, crash: CrashPlan, metadata: str, while_down: Callable[[], None] | None = None) -> None:
        self.kill(crash.point)
        if while_down is not None:
            while_down()
        time.sleep(crash.down)  # the daemon stays dead this long (part of the plan, not a synchronisation)
        run = self.start_daemon(metadata)
        if crash.again is not None:  # a crash loop: killed again while starting (or just after)
            sleep_until(run.launched + crash.again)
            self.kill("restart_loop")
            self.start_daemon(metadata)
        self.wait_started()

    # -- the scenario's moments --

    def deadline(self) -> float:
        """The drain's deadline as last written (a drain over in 20 ms may be seen only in its event)."""
        return float(
            wait_until(lambda: self.watch.latest() and latest_deadline(self.watch.states), 30, "a deadline")
        )

    def drain_finished(self) -> dict[str, Any] | None:
        state = self.watch.latest()
        if state and state["drain"] is None and state["last_outcome"] is not None:
            return state
        return None

    def terms(self) -> int:
        return sum(len(h.said("term")) for h in self.holders)

    def due(self, crash: CrashPlan, set_off: Callable[[], None]) -> float:
        """When `crash` happens (wall clock); waits first for whatever the moment depends on."""
        if crash.point == "after_set":
            assert self.event_set is not None
            return self.event_set + crash.offset
        if crash.point == "after_terms":
            limit = self.deadline() - 0.2
            wait_until(
                lambda: self.terms() >= crash.terms or time.time() >= limit, 30, f"{crash.terms} SIGTERM(s)"
            )
            return time.time() + crash.offset / 10
        if crash.point in ("during_wait", "before_deadline"):
            return self.deadline() - crash.offset
        if crash.point == "after_deadline":
            return self.deadline() + crash.offset
        if crash.point == "after_clear":
            wait_until(self.drain_finished, 30, "the drain to finish before the event clears")
            wait_until(lambda: all(h.gone for h in self.holders), 20, "every holder gone before the clear")
            set_off()
            assert self.cleared_at is not None
            return self.cleared_at + crash.offset
        raise ValueError(f"unknown crash point {crash.point!r}")

    def run(self) -> None:
        from watchdog.fake.server import FakeMetadataServer

        with FakeMetadataServer(listen="127.0.0.1:0") as fake:

            def set_on() -> None:
                fake.set(self.key, self.on)
                self.event_set = time.time()

            def set_off() -> None:
                fake.set(self.key, self.off)
                self.cleared_at = time.time()

            self.holders = [Holder(h, self.device) for h in self.plan.holders]
            wait_until(lambda: all(h.said("ready") for h in self.holders), 30, "every holder ready")
            self.start_daemon(fake.address)
            self.wait_started()
            crashes = list(self.plan.crashes)
            if crashes and crashes[0].point == "before_event":
                first = crashes.pop(0)
                sleep_until(time.time() + first.offset)
                self.crash(first, fake.address, while_down=set_on)
            else:
                set_on()
            for crash in crashes:
                sleep_until(self.due(crash, set_off))
                self.crash(crash, fake.address)
            # No drain lost: the event that started before the crashes is drained after them (with an
            # after_clear crash, the drain had finished before the clear).
            if self.cleared_at is None:
                wait_until(
                    self.drain_finished, self.plan.grace + 30, "the drain to finish after the restarts"
                )
            outcomes = [s["last_outcome"] for s in self.watch.states if s["last_outcome"]]
            self.finished = {"outcome": outcomes[-1]} if outcomes else None
            wait_until(lambda: all(h.gone for h in self.holders), 20, "every holder gone")
            if self.cleared_at is None:
                set_off()
            self.cleared = wait_until(
                lambda: (s := self.watch.latest()) and not s["events"] and not s["drain"] and s,
                20,
                "the state file to be empty after the event cleared",
            )
            self.stop_status = self.daemon.stop()

    def facts(self) -> dict[str, Any]:
        self.watch.close()
        self.watch.read()
        alive = {id(h): h.popen.poll() is None for h in self.holders}
        for holder in self.holders:
            holder.close()
        for run in self.runs:
            if run.popen.poll() is None:
                run.kill()
        return {
            "plan": self.plan.to_json(),
            "event_set": self.event_set,
            "cleared_at": self.cleared_at,
            "holders": [h.facts(alive[id(h)]) for h in self.holders],
            "runs": [r.facts() for r in self.runs],
            "crashes": self.crashes,
            "states": self.watch.states,
            "finished": self.finished,
            "cleared": self.cleared,
            "stop_status": self.stop_status,
            "state_dir": sorted(os.listdir(self.state_dir)) if self.state_dir.exists() else [],
            "errors": self.errors + self.watch.errors,
        }


def driver_main(workdir: Path) -> int:
    """Inside the namespace: run the plan in `workdir`, write `workdir/facts.json`."""
    if os.getpid() != 1:
        sys.stderr.write("the crash scenario driver runs only as init of a private PID namespace\n")
        return 2
    plan = Plan.from_json(json.loads((workdir / "plan.json").read_text()))
    driver = Driver(workdir, plan)
    try:
        driver.run()
    except Exception as error:  # noqa: BLE001 - reported as a violation with the facts gathered so far
        driver.errors.append(f"{type(error).__name__}: {error}")
    (workdir / "facts.json").write_text(json.dumps(driver.facts(), indent=1))
    driver.node.close()
    return 0


if __name__ == "__main__":
    sys.exit(driver_main(Path(sys.argv[1])))
