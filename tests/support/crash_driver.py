"""The crash scenario's driver, run as init of a private PID namespace (`python -m tests.support.crash_driver
WORKDIR`): the fake, the holders and the daemon runs of one plan; it writes what happened to facts.json."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.crash_checks import latest_deadline, settled
from tests.support.crash_parts import DaemonRun, Holder, StateWatch
from tests.support.crash_scenario import KEYS, CrashPlan, Plan
from tests.support.waiting import wait_for
from watchdog.store.history import HISTORY_FILE, load_entries


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

    def settled(self) -> bool:
        """`crash_checks.settled`, with the state file read after the holders were seen gone: a drain that
        killed the last of them was on file by then, so a file with no drain says it has ended too."""
        gone = all(h.gone for h in self.holders)
        return settled(self.watch.latest(), gone)

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
            wait_until(self.settled, 50, "every holder gone and every drain ended before the clear")
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
                wait_until(self.settled, self.plan.grace + 50, "every holder gone and every drain ended")
            outcomes = [s["last_outcome"] for s in self.watch.states if s["last_outcome"]]
            self.finished = {"outcome": outcomes[-1]} if outcomes else None
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
            "history": load_entries(str(self.state_dir / HISTORY_FILE)),
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
