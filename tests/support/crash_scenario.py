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
at the end); `check` (tests/support/crash_checks.py) turns plan + facts into violations; the driver is
tests/support/crash_driver.py:

- each holder got at most one SIGTERM for the event (counted by the holder), and none got none unless a crash
  left an unconfirmed SIGTERM intent for it in the state file (write-ahead: then "possibly sent");
- the drain's deadline (state.json `drain.deadline_at`, each event's `deadline`) never moves later, and the
  event is drained once (one `started_at`);
- a holder that ignores SIGTERM dies of SIGKILL within +-1 s of the original deadline; if no daemon was up at
  the deadline, within 1 s of the first one back (a dead daemon cannot kill anything);
- a holder that exits on SIGTERM is never SIGKILLed, a holder that released the device is left alone;
- no drain lost: after the last restart the drain finishes (last_outcome), every holder gone or released;
- the drain is in the history (history.jsonl) once, finished, with every holder that got a SIGTERM;
- no orphaned state: once the event cleared, state.json has no events, no drain, no signals, no outcome, and
  the state dir holds nothing but state.json and history.jsonl (no `.state.json.*.tmp`, nothing set aside
  as corrupt);
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
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.crash_checks import check, is_crash_temp_file

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
            [*namespace_command(), sys.executable, "-m", "tests.support.crash_driver", str(workdir)],
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


__all__ = ["POINTS", "Plan", "check", "is_crash_temp_file", "make_plan", "run_scenario"]
