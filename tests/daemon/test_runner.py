"""The daemon's drain runner, driven as the daemon's loop drives it (its inbox, the real scanning thread): its
waves written ahead to the state file, and held until that write is done; a resumed drain keeps the
deadline and the SIGKILL of what was signalled before the restart."""

from __future__ import annotations

import dataclasses
import os
import queue
import signal
import threading
from pathlib import Path

from tests.support.workloads import OwnScanner, Workloads
from watchdog.config.settings import default_config
from watchdog.core.clock import SystemClock
from watchdog.core.drain import DrainPlan
from watchdog.core.drain_record import DrainRecord, End, ExitStatus, Outcome
from watchdog.core.ladder import ladder_for
from watchdog.core.lifecycle import Lifecycle
from watchdog.core.moments import HoldersFound, ProcessSignalled
from watchdog.core.process import ProcessIdentity
from watchdog.daemon.inbox import Inbox
from watchdog.daemon.index import HolderIndex, HoldersScanned
from watchdog.daemon.loop import Message, PersistenceChanged
from watchdog.daemon.outputs import Outputs
from watchdog.daemon.runner import AttemptEnded, DrainOrder, DrainReport, DrainRunner, earlier_processes
from watchdog.daemon.telling import SignalCounter, Telling
from watchdog.host.holders import ScanResult
from watchdog.host.procfs import start_time
from watchdog.store.records import ExitRecord, SignalRecord
from watchdog.store.statefile import StateStore
from watchdog.surface.metrics import Metrics


class Loop:
    """The daemon's loop, as far as a drain needs it, in a thread of its own: one inbox, the real scanning
    thread (`HolderIndex`, scanning with `runner.scanner`), the runner's calls in the loop's order, the
    drain's moments told (the signal counter). `get` returns the record an attempt ended with (None: it
    failed)."""

    def __init__(self, runner_of: RunnerOf, metrics: Metrics) -> None:
        self.inbox: Inbox[Message] = Inbox()
        self.stop = threading.Event()
        outputs = Outputs(metrics)
        self.index = HolderIndex(self, self.inbox.put, lambda: True, self.stop, outputs=outputs)
        self.runner = runner_of(self)
        self.telling = Telling(outputs, Lifecycle(), [SignalCounter(metrics)])
        self.ended: queue.Queue[DrainRecord | None] = queue.Queue()
        self.index.start()

    def scan(self) -> ScanResult:
        """The scanning thread's scan: the runner's scanner (a test may swap it)."""
        scanner = self.runner.scanner
        assert isinstance(scanner, OwnScanner)
        return scanner.scan()

    def start(self, order: DrainOrder) -> None:
        """Start `order` here, as the loop does, and run the loop's turns in a thread."""
        said = self.runner.start(order)
        threading.Thread(target=self._run, args=(said,), daemon=True).start()

    def cancel(self) -> None:
        self.runner.cancel_drain()
        self.inbox.ring()

    def get(self, timeout: float) -> DrainRecord | None:
        return self.ended.get(timeout=timeout)

    def _run(self, said: list[DrainReport]) -> None:
        runner, clock = self.runner, SystemClock()
        while not self._told(said):
            due = runner.next_due(clock.monotonic())
            wait = 1.0 if due is None else min(1.0, max(0.0, due - clock.monotonic()))
            said = runner.exited(runner.wait(wait, self.inbox))
            try:
                message = self.inbox.get_nowait()
            except queue.Empty:
                message = None
            if isinstance(message, HoldersScanned):
                said += runner.scanned(message)
            elif isinstance(message, PersistenceChanged):
                said += runner.written()
            said += runner.step()

    def _told(self, said: list[DrainReport]) -> bool:
        for report in said:
            if isinstance(report, AttemptEnded):
                self.ended.put(report.record)
                return True
            if isinstance(report, (HoldersFound, ProcessSignalled)):
                self.telling.tell(report)
        return False


class RunnerOf:
    """Builds the runner a `Loop` drives (it needs the loop's inbox and scanning thread)."""

    def __init__(self, workloads: Workloads, state_dir: Path, store: StateStore, metrics: Metrics) -> None:
        self.workloads, self.state_dir, self.store, self.metrics = workloads, state_dir, store, metrics

    def __call__(self, loop: Loop) -> DrainRunner:
        config = dataclasses.replace(
            default_config(), devices=(str(self.workloads.device),), state_dir=str(self.state_dir)
        )
        return DrainRunner(
            config, scanner=OwnScanner(self.workloads), store=self.store, clock=SystemClock(),
            stop=loop.stop, ask_scan=loop.index.scan_now, wakeup=loop.inbox.wakeup,
            persistence_changed=lambda: loop.inbox.put(PersistenceChanged()), outputs=Outputs(self.metrics),
        )  # fmt: skip


def runner_for(
    workloads: Workloads, state_dir: Path, store: StateStore | None = None, metrics: Metrics | None = None
) -> tuple[DrainRunner, Loop]:
    metrics = metrics or Metrics()
    loop = Loop(RunnerOf(workloads, state_dir, store or StateStore(str(state_dir)), metrics), metrics)
    return loop.runner, loop


def order(seconds: float, *, already: dict[object, set[int]] | None = None) -> DrainOrder:
    clock = SystemClock()
    plan = DrainPlan(
        deadline=clock.monotonic() + seconds, ladder=ladder_for("kill"), already_signalled=already or {},  # type: ignore[arg-type]
        drain_id="20261201T000000.000Z",
    )  # fmt: skip
    return DrainOrder("maintenance-event", plan, clock.wall() + seconds, ("ev",))


def deadline(todo: DrainOrder) -> float:
    assert todo.plan.deadline is not None
    return todo.plan.deadline


def test_a_drain_runs_on_the_loop_and_writes_each_signal_ahead(workloads: Workloads, state_dir: Path) -> None:
    child = workloads.start("handled")
    metrics = Metrics()
    runner, done = runner_for(workloads, state_dir, metrics=metrics)
    done.start(order(30.0))
    assert runner.running
    record = done.get(timeout=30)
    assert record is not None
    assert record.outcome is Outcome.EXITED
    assert child.popen.wait(timeout=10) == 0
    assert runner.writer.flush(10)  # what became of the signal is written behind it, never waited for
    (written,) = runner.store.state.signals
    assert (written.identity, written.signal, written.result) == (child.identity, "SIGTERM", "sent")
    assert metrics.registry.get_sample_value("tpu_watchdog_signals_sent_total", {"signal": "SIGTERM"}) == 1
    assert not runner.running


def test_a_resumed_drain_past_its_deadline_kills_at_once_without_a_second_sigterm(
    workloads: Workloads, state_dir: Path
) -> None:
    stubborn = workloads.start("report")  # signalled before the restart; ignores SIGTERM
    runner, done = runner_for(workloads, state_dir)
    done.start(order(-1.0, already={stubborn.identity: {signal.SIGTERM}}))
    record = done.get(timeout=30)
    assert record is not None
    assert record.outcome is Outcome.TIMED_OUT
    assert stubborn.popen.wait(timeout=10) == -signal.SIGKILL
    assert [s.signal for s in runner.store.state.signals] == ["SIGKILL"]


def test_a_resumed_drain_cancelled_before_its_deadline_signals_nobody(
    workloads: Workloads, state_dir: Path
) -> None:
    stubborn = workloads.start("report")
    runner, done = runner_for(workloads, state_dir)
    done.start(order(60.0, already={stubborn.identity: {signal.SIGTERM}}))
    done.cancel()  # the first metadata answer says the event cleared while the daemon was down
    record = done.get(timeout=30)
    assert record is not None
    assert record.outcome is Outcome.CANCELLED
    assert stubborn.alive()
    assert runner.store.state.signals == ()


class GatedScanner(OwnScanner):
    """The real scanner, whose full scan waits until the test opens the gate: a slow scan of a big host."""

    def __init__(self, workloads: Workloads) -> None:
        super().__init__(workloads)
        self.gate = threading.Event()

    def scan(self) -> ScanResult:
        assert self.gate.wait(30), "the test never opened the gate"
        return super().scan()


def test_indexed_holders_are_signalled_before_the_full_scan_and_newcomers_after_it(
    workloads: Workloads, state_dir: Path
) -> None:
    indexed = workloads.start("handled")
    index = HoldersScanned(tuple(OwnScanner(workloads).scan().holders))  # the warm index, PIDs unknown
    newcomer = workloads.start("handled")  # opened the device after that scan
    runner, done = runner_for(workloads, state_dir)
    scanner = GatedScanner(workloads)
    runner.scanner = scanner
    todo = order(30.0)
    first = runner.first_wave(deadline(todo), index)  # as the loop does
    done.start(dataclasses.replace(todo, first_wave=first))
    assert indexed.popen.wait(timeout=10) == 0  # its SIGTERM came while the full scan had not returned
    assert newcomer.alive()
    assert [s.identity for s in runner.store.state.signals] == [indexed.identity]  # written ahead
    scanner.gate.set()
    assert newcomer.popen.wait(timeout=10) == 0
    record = done.get(timeout=30)
    assert record is not None
    assert record.outcome is Outcome.EXITED
    assert not record.processes[newcomer.identity].late_arrival
    assert {s.identity for s in runner.store.state.signals} == {indexed.identity, newcomer.identity}


def test_an_indexed_process_that_let_go_of_the_device_is_not_signalled(
    workloads: Workloads, state_dir: Path
) -> None:
    released = workloads.start("release")
    index = HoldersScanned(tuple(OwnScanner(workloads).scan().holders))
    released.popen.send_signal(signal.SIGTERM)  # closes the device, keeps running
    released.expect("released")
    runner, done = runner_for(workloads, state_dir)
    todo = order(30.0)
    assert runner.first_wave(deadline(todo), index) == ()  # re-checked: it holds nothing now
    done.start(todo)
    record = done.get(timeout=30)
    assert record is not None
    assert record.outcome is Outcome.NO_HOLDERS
    assert released.alive()
    assert runner.store.state.signals == ()


def test_a_job_started_after_the_index_scan_is_signalled_before_the_full_scan(
    workloads: Workloads, state_dir: Path
) -> None:
    old = workloads.start("release")  # there at the index's scan, holding nothing then
    old.popen.send_signal(signal.SIGTERM)
    old.expect("released")
    scan = OwnScanner(workloads).scan()  # the loop's last scan: no holders, every PID seen
    assert scan.holders == ()
    index = HoldersScanned(tuple(scan.holders), frozenset(scan.pids), scan.last_pid)
    old.reopen()  # an old process that opened a device since: only the full scan finds it
    new = workloads.start("handled")  # a job started after the index's scan: a PID it has not seen
    runner, done = runner_for(workloads, state_dir)
    scanner = GatedScanner(workloads)
    runner.scanner = scanner
    todo = order(30.0)
    first = runner.first_wave(
        deadline(todo), index
    )  # as the loop does: the new PIDs looked at, nobody indexed
    assert [h.identity for h in first] == [new.identity]
    done.start(dataclasses.replace(todo, first_wave=first))
    assert new.popen.wait(timeout=10) == 0  # its SIGTERM came while the full scan had not returned
    assert runner.store.state.find(old.identity, signal.SIGTERM) is None  # not even intended yet
    scanner.gate.set()
    old.expect("released")  # the full scan's SIGTERM
    record = done.get(timeout=30)
    assert record is not None
    assert record.outcome is Outcome.EXITED, record
    assert not record.processes[new.identity].late_arrival


def test_a_resumed_drain_tells_an_earlier_end_as_the_earlier_run_saw_it() -> None:
    """The state file kept how each signalled process ended: the resumed drain has its time and status;
    one with no end on file (it ended while no daemon ran) is unseen, as before."""
    me = os.getpid()
    running = ProcessIdentity(me, start_time(me) or 0)  # still runs: it released the device
    gone, unseen = ProcessIdentity(me, 1), ProcessIdentity(me, 2)  # this PID, another process: ended
    on_file = [SignalRecord(i, "train", "SIGTERM", 1000.0, 1000.1, "sent") for i in (running, gone, unseen)]
    ends = {
        running: ExitRecord(running, "released", 1002.0),
        gone: ExitRecord(gone, "exited", 1003.5, None, signal.SIGTERM),
    }
    procs = {p.identity: p for p in earlier_processes(on_file, ends, [], False, lambda wall: wall - 1000.0)}
    assert (procs[running].end, procs[running].ended_at, procs[running].exit_status) == (
        End.RELEASED,
        2.0,
        None,
    )
    assert (procs[gone].end, procs[gone].ended_at) == (End.EXITED, 3.5)
    assert procs[gone].exit_status == ExitStatus(signal=signal.SIGTERM)
    assert (procs[unseen].end, procs[unseen].ended_at, procs[unseen].exit_status) == (
        End.EXITED,
        None,
        ExitStatus(),
    )
