"""The drain against real processes holding a real device node, found by the real scanner."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.readable import readable
from tests.support.waiting import wait_for
from tests.support.wakeups import asleep, wakeups
from tests.support.workloads import OwnScanner, Workloads
from watchdog.core.drain import DrainPlan
from watchdog.core.drain_record import DrainRecord, End, ExitStatus, SignalResult
from watchdog.core.process import Holder, ProcessIdentity
from watchdog.core.vocabulary import Outcome
from watchdog.daemon.draining import DrainListener, run_drain
from watchdog.host.exits import PidfdExitWaiter, Wakeup
from watchdog.host.procfs import start_time
from watchdog.host.signals import PidfdSignaller, ProcessHandles

TERM, KILL = signal.SIGTERM, signal.SIGKILL


@pytest.fixture
def workloads(tmp_path: Path) -> Iterator[Workloads]:
    w = Workloads(tmp_path)
    yield w
    w.close()


def scanner_for(w: Workloads) -> OwnScanner:
    return OwnScanner(w)


@dataclass
class StaticScan:
    holders: tuple[Holder, ...] = ()


class StaticScanner:
    def scan(self) -> StaticScan:
        return StaticScan()


class Live(DrainListener):
    """Collects the listener's calls and the latest record from another thread."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ProcessIdentity, int]] = []
        self.record: DrainRecord | None = None

    def before_signals(self, intents: Sequence[tuple[ProcessIdentity, int]], record: DrainRecord) -> None:
        self.calls += [("intent", identity, signum) for identity, signum in intents]

    def after_signals(
        self, sent: Sequence[tuple[ProcessIdentity, int, SignalResult]], record: DrainRecord
    ) -> None:
        self.calls += [("sent", identity, signum) for identity, signum, _ in sent]

    def updated(self, record: DrainRecord) -> None:
        self.record = record

    def signalled(self, identity: ProcessIdentity) -> bool:
        return ("sent", identity, TERM) in self.calls


def in_thread(
    holders: Sequence[Holder], plan: DrainPlan, **kwargs: Any
) -> tuple[ThreadPoolExecutor, Future[DrainRecord]]:
    pool = ThreadPoolExecutor(max_workers=1)
    return pool, pool.submit(run_drain, holders, plan, **kwargs)


def test_workloads_that_exit_on_sigterm_end_the_drain_early(workloads: Workloads) -> None:
    default = workloads.start("default")
    handled = workloads.start("handled")
    slow = workloads.start("slow")
    forking = workloads.start("fork")
    session = workloads.start("default", new_session=True)
    scanner = scanner_for(workloads)
    holders = scanner.scan().holders
    assert forking.grandchild is not None
    everyone = {c.identity for c in workloads.children} | {forking.grandchild}
    assert {h.identity for h in holders} == everyone
    live = Live()
    record = run_drain(holders, DrainPlan(grace=120, rescan_interval=0.2), scanner=scanner, listener=live)
    assert record.outcome is Outcome.EXITED, record
    assert record.ended is not None
    assert record.ended - record.started < 60
    procs = record.processes
    assert str(procs[default.identity].exit_status) == "killed by SIGTERM"
    assert str(procs[session.identity].exit_status) == "killed by SIGTERM"
    assert str(procs[handled.identity].exit_status) == "exited 0"
    assert str(procs[slow.identity].exit_status) == "exited 0"
    assert str(procs[forking.identity].exit_status) == "exited 0"
    # not our child: its status is known only if it was still a zombie when we looked
    assert str(procs[forking.grandchild].exit_status) in ("killed by SIGTERM", "unknown")
    for identity in everyone:
        assert not procs[identity].killed
        assert [c for c in live.calls if c[1] == identity] == [
            ("intent", identity, TERM),
            ("sent", identity, TERM),
        ]


def test_ignoring_sigterm_is_killed_at_the_deadline_releasing_is_not(workloads: Workloads) -> None:
    stubborn = workloads.start("ignore")
    releasing = workloads.start("release")
    handled = workloads.start("handled")
    scanner = scanner_for(workloads)
    plan = DrainPlan(grace=2, rescan_interval=0.2, kill_wait=10)
    record = run_drain(scanner.scan().holders, plan, scanner=scanner)
    assert record.outcome is Outcome.TIMED_OUT, record
    procs = record.processes
    assert procs[stubborn.identity].killed
    assert str(procs[stubborn.identity].exit_status) == "killed by SIGKILL"
    assert procs[releasing.identity].end is End.RELEASED
    assert not procs[releasing.identity].killed
    assert releasing.alive()
    assert not procs[handled.identity].killed


def test_a_holder_that_appears_mid_drain_is_sigtermed_too(workloads: Workloads) -> None:
    first = workloads.start("gate")
    scanner = scanner_for(workloads)
    live = Live()
    plan = DrainPlan(grace=60, rescan_interval=0.2)
    pool, future = in_thread(scanner.scan().holders, plan, scanner=scanner, listener=live)
    with pool:
        first.expect("term")
        newcomer = workloads.start("handled")  # e.g. a supervisor restarting the job
        wait_for(lambda: live.signalled(newcomer.identity), timeout=30, what="the newcomer's SIGTERM")
        first.open_gate()
        record = future.result(timeout=60)
    assert record.outcome is Outcome.EXITED, record
    assert str(record.processes[newcomer.identity].exit_status) == "exited 0"
    assert record.processes[newcomer.identity].first_seen > record.started
    assert record.processes[newcomer.identity].late_arrival
    assert not record.processes[first.identity].late_arrival
    assert str(record.processes[first.identity].exit_status) == "exited 0"


class SlowToDie(PidfdExitWaiter):
    """The real exit waiter, which reports one process's exit only once the test says so: a SIGKILLed TPU
    job can take seconds to die (its driver's teardown), which a test child cannot be made to do."""

    def __init__(self, handles: ProcessHandles, slow: ProcessIdentity) -> None:
        super().__init__(handles)
        self.slow, self.dead = slow, threading.Event()
        self.held: list[tuple[ProcessIdentity, ExitStatus]] = []

    def wait(self, timeout: float) -> list[tuple[ProcessIdentity, ExitStatus]]:
        exited = super().wait(timeout) + self.held
        self.held = [e for e in exited if e[0] == self.slow and not self.dead.is_set()]
        return [e for e in exited if e not in self.held]


def test_a_process_that_opens_a_device_while_the_killed_die_gets_sigterm_and_sigkill(
    workloads: Workloads,
) -> None:
    stubborn = workloads.start("ignore")
    scanner, live = scanner_for(workloads), Live()
    handles = ProcessHandles()
    exits = SlowToDie(handles, stubborn.identity)
    plan = DrainPlan(grace=0.5, rescan_interval=0.1, kill_wait=60)
    pool, future = in_thread(
        scanner.scan().holders, plan, scanner=scanner, listener=live, signaller=PidfdSignaller(handles),
        exits=exits,
    )  # fmt: skip
    with pool:
        wait_for(lambda: ("sent", stubborn.identity, KILL) in live.calls, timeout=30, what="the SIGKILL")
        newcomer = workloads.start("report")  # opens the device in the KILLING phase
        wait_for(lambda: ("sent", newcomer.identity, KILL) in live.calls, timeout=30, what="its SIGKILL")
        assert newcomer.popen.wait(timeout=10) == -KILL
        exits.dead.set()
        record = future.result(timeout=60)
    handles.close()
    assert live.calls.index(("sent", newcomer.identity, TERM)) < live.calls.index(
        ("sent", newcomer.identity, KILL)
    )
    assert record.outcome is Outcome.TIMED_OUT, record
    assert record.processes[newcomer.identity].late_arrival


def test_a_holder_whose_identity_changed_is_never_signalled(workloads: Workloads) -> None:
    child = workloads.start("report")
    reused = ProcessIdentity(child.identity.pid, child.identity.start_time - 7)
    stale = Holder(reused, "python3", (), 0, (str(workloads.device),))
    record = run_drain([stale], DrainPlan(grace=30), scanner=StaticScanner())
    assert record.processes[reused].end is End.IDENTITY_CHANGED
    assert record.outcome is Outcome.EXITED
    os.kill(child.identity.pid, signal.SIGUSR1)
    child.expect("usr1")  # the first signal it saw: no SIGTERM reached it
    assert child.alive()


def test_pid_1_and_the_watchdog_itself_in_a_holder_list_are_never_signalled_nor_waited_for() -> None:
    """A scanner bug (or a hostile procfs) naming them costs nothing: refused at the signal, drain over."""
    named = [ProcessIdentity(pid, start_time(pid) or 0) for pid in (1, os.getpid())]
    holders = [Holder(identity, "init", (), 0, ("/dev/accel0",)) for identity in named]
    record = run_drain(holders, DrainPlan(grace=30), scanner=StaticScanner())
    assert record.outcome is Outcome.EXITED  # nothing left to wait for; no SIGKILL either
    for identity in named:
        proc = record.processes[identity]
        assert proc.end is End.PROTECTED
        assert [s.result for s in proc.signals] == [SignalResult.PROTECTED]


@pytest.mark.parametrize(("event", "outcome"), [("cancel", Outcome.CANCELLED), ("stop", Outcome.INTERRUPTED)])
def test_cancel_and_stop_end_the_drain_without_sigkill(
    workloads: Workloads, event: str, outcome: Outcome
) -> None:
    stubborn = workloads.start("ignore")
    scanner = scanner_for(workloads)
    cancel, stop = threading.Event(), threading.Event()
    live = Live()
    plan = DrainPlan(grace=120)
    pool, future = in_thread(
        scanner.scan().holders, plan, scanner=scanner, cancel=cancel, stop=stop, listener=live
    )
    with pool:
        wait_for(lambda: live.signalled(stubborn.identity), what="the SIGTERM")
        (cancel if event == "cancel" else stop).set()
        record = future.result(timeout=30)
    assert record.outcome is outcome
    assert not record.processes[stubborn.identity].killed
    assert stubborn.alive()
    assert ("sent", stubborn.identity, KILL) not in live.calls


def test_dry_run_sends_nothing_and_reports_the_same(workloads: Workloads) -> None:
    children = [workloads.start(mode) for mode in ("default", "handled", "ignore")]
    scanner = scanner_for(workloads)
    plan = DrainPlan(grace=1, rescan_interval=0.2, dry_run=True)
    record = run_drain(scanner.scan().holders, plan, scanner=scanner)
    assert record.outcome is Outcome.TIMED_OUT
    assert all(child.alive() for child in children)
    for child in children:
        proc = record.processes[child.identity]
        assert proc.signalled_at is not None
        assert proc.killed  # would have been
        assert proc.pending
    assert record.dry_run


def test_dry_run_refuses_a_real_signaller(workloads: Workloads) -> None:
    with pytest.raises(ValueError, match="dry-run signaller"):
        run_drain([], DrainPlan(dry_run=True), scanner=StaticScanner(), signaller=PidfdSignaller())


def test_a_resumed_drain_never_sigterms_again_but_kills_on_time(workloads: Workloads) -> None:
    child = workloads.start("report")
    scanner = scanner_for(workloads)
    live = Live()
    plan = DrainPlan(deadline=time.monotonic() + 0.5, already_signalled={child.identity: {TERM}})
    record = run_drain(scanner.scan().holders, plan, scanner=scanner, listener=live)
    assert record.outcome is Outcome.TIMED_OUT
    assert live.calls == [("intent", child.identity, KILL), ("sent", child.identity, KILL)]
    assert child.popen.wait(timeout=20) == -KILL
    ready = readable([child.out])
    assert ready
    assert os.read(child.out, 100) == b""


def test_failing_hooks_and_scans_are_noted_not_raised(workloads: Workloads) -> None:
    child = workloads.start("gate")

    class Broken:
        def scan(self) -> StaticScan:
            raise OSError("procfs unreadable")

    class DiskFull(Live):
        def before_signals(self, intents: Sequence[tuple[ProcessIdentity, int]], record: DrainRecord) -> None:
            raise OSError("disk full")

    live = DiskFull()
    plan = DrainPlan(grace=60, rescan_interval=0.05)
    pool, future = in_thread(scanner_for(workloads).scan().holders, plan, scanner=Broken(), listener=live)

    def scan_failure_noted() -> bool:
        return live.record is not None and any("procfs unreadable" in n for n in live.record.notes)

    with pool:
        child.expect("term")  # sent despite the failed write-ahead
        wait_for(scan_failure_noted, what="the failed scan in the record")
        child.open_gate()
        record = future.result(timeout=30)
    assert record.outcome is Outcome.EXITED
    assert any("disk full" in n for n in record.notes)


def test_no_holders_returns_at_once() -> None:
    record = run_drain([], DrainPlan(), scanner=StaticScanner())
    assert record.outcome is Outcome.NO_HOLDERS
    with pytest.raises(ValueError, match="not both"):
        DrainPlan(grace=1, deadline=2)


def test_a_wave_of_signals_has_its_intents_written_once_before_the_first_signal(workloads: Workloads) -> None:
    children = [workloads.start("report") for _ in range(3)]  # say "term" on SIGTERM; never exit
    waves: list[tuple[list[tuple[ProcessIdentity, int]], bool]] = []
    results: list[list[tuple[ProcessIdentity, int, SignalResult]]] = []

    def anyone_signalled() -> bool:
        ready = readable([c.out for c in children])
        return bool(ready)

    class Waves(DrainListener):
        def before_signals(self, intents: Sequence[tuple[ProcessIdentity, int]], record: DrainRecord) -> None:
            waves.append((list(intents), anyone_signalled()))

        def after_signals(
            self, sent: Sequence[tuple[ProcessIdentity, int, SignalResult]], record: DrainRecord
        ) -> None:
            results.append(list(sent))

    plan = DrainPlan(grace=1.0, rescan_interval=0.2)
    record = run_drain(
        scanner_for(workloads).scan().holders, plan, scanner=scanner_for(workloads), listener=Waves()
    )
    assert record.outcome is Outcome.TIMED_OUT
    (terms, early), (kills, _) = waves
    assert sorted(terms) == sorted((c.identity, TERM) for c in children)
    assert not early  # every intent was written before any child got its SIGTERM
    assert sorted(kills) == sorted((c.identity, KILL) for c in children)
    assert [r for _, _, r in results[0]] == [SignalResult.SENT] * 3


class Turns(Live):
    """Counts the drain loop's turns: it asks the listener for the deadline once a turn."""

    def __init__(self) -> None:
        super().__init__()
        self.turns = 0

    def deadline(self) -> float | None:
        self.turns += 1
        return None


def test_with_a_wakeup_the_drain_sleeps_until_due_and_a_cancel_wakes_it(workloads: Workloads) -> None:
    stubborn = workloads.start("ignore")  # holds the device after its SIGTERM: the drain waits for it
    scanner, live, wake, cancel = scanner_for(workloads), Turns(), Wakeup(), threading.Event()
    plan = DrainPlan(grace=600, rescan_interval=600)  # nothing is due for ten minutes
    records: list[DrainRecord] = []
    drain = threading.Thread(
        target=lambda: records.append(
            run_drain(scanner.scan().holders, plan, scanner=scanner, listener=live, cancel=cancel, wake=wake)
        ),
        daemon=True,
    )
    drain.start()
    wait_for(lambda: ("sent", stubborn.identity, TERM) in live.calls, timeout=30, what="the SIGTERM")
    wait_for(lambda: asleep(drain, in_kernel="poll"), timeout=30, what="the drain asleep in poll")
    turns = live.turns
    assert wakeups(drain, over=0.5) == 0  # it polled every 0.1 s (POLL_CAP) before it had a wakeup
    assert live.turns == turns
    cancel.set()
    wake.ring()
    wait_for(lambda: records, timeout=30, what="the drain to end on the cancel")  # not at its next due time
    assert records[0].outcome is Outcome.CANCELLED
    assert stubborn.popen.poll() is None  # cancelled: never killed
    wake.close()
