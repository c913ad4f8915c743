"""The daemon's drains, one at a time, each in a thread of its own: the drain's side of the daemon.

The loop thread decides (the lifecycle); this runs what it decided and reports back through `done`. It is
the drain's `DrainListener`: each wave of signals is written ahead to the state file, after the drain's own
state is on disk (through `StateWriter`: a stuck disk holds a wave back at most `WRITE_AHEAD_WAIT`), and
each signal is logged with the process, the drain and the events it serves.

A drain starts from the warm holder index, in the loop's thread (`first_wave`): the indexed holders
(`indexed`: the holders of its last scan, refreshed while idle), each re-checked from its own /proc entries
(same process, still holding a device), and the holders among the processes the index has not seen
(`known_pids`: a job started since its last scan), scanned alone. The loop writes their intents with the
drain's own state, and the drain signals them all at once: the first SIGTERM, a new job's included, waits for
neither a scan of every fd on the host nor a second write. Then the full scan (an old process that opened a
device since), and its newcomers are signalled as before. With no index yet, the drain starts from a full
scan.

The drain's thread tells nothing and shows nothing itself: what it has to say (its holders found, each
signal, its record as it changes, its scans, its end) it reports to the loop (`report`: the loop's inbox,
one queue, so the loop hears it in the order it happened), and the loop tells and shows it. The other way,
the loop says what changed (`move_deadline`, `admit`) in the drain's own queue, and `cancel_drain` sets the
drain's cancel event; each rings the drain's `wakeup`, so it hears at once. The two threads share nothing
but those queues and the order the drain was started with.
"""

from __future__ import annotations

import collections
import copy
import functools
import logging
import signal
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeAlias

from watchdog.config.settings import Config
from watchdog.core.clock import Clock
from watchdog.core.drain import DrainPlan
from watchdog.core.drain_record import (
    UNKNOWN_EXIT,
    DrainRecord,
    End,
    ExitStatus,
    ProcessRecord,
    SentSignal,
    SignalResult,
)
from watchdog.core.ladder import Ladder
from watchdog.core.lifecycle import ActiveDrain
from watchdog.core.moments import HoldersFound, ProcessSignalled
from watchdog.core.process import Holder, ProcessIdentity
from watchdog.core.vocabulary import Output
from watchdog.daemon.drain_thread import DrainListener, ExitWaiter, Scanner, Signaller, run_drain
from watchdog.daemon.index import HoldersScanned
from watchdog.daemon.outputs import Outputs
from watchdog.daemon.writeahead import WRITE_AHEAD_WAIT, StateWriter
from watchdog.host.exits import Wakeup
from watchdog.host.procfs import start_time
from watchdog.store.records import ExitRecord, Intent, SignalRecord
from watchdog.store.statefile import StateStore

log = logging.getLogger("tpu-watchdog")

RESCAN_INTERVAL = 1.0  # s between scans while an event is on: a drain's rescans, and the late-arrival watch
FIRST_SCAN_TRIES = 3  # a drain's first scan is tried this often (0.2 s apart) before the attempt fails
FLUSH_WAIT = 5.0  # longest a drain's end waits for its state-file writes (a stuck disk must not stop it)


@dataclass(frozen=True)
class ThreadReturned:
    """The drain's thread returned: the drain's record, for the loop to take (the `DrainEnded` moment is
    told from it), or None: the attempt failed, and it is started again."""

    record: DrainRecord | None


@dataclass(frozen=True)
class RecordChanged:
    """A copy of the running drain's record, as it changed (at most every 0.1 s, and at its end): /status
    and the progress lines show it."""

    record: DrainRecord


@dataclass(frozen=True)
class HoldersNow:
    """A scan of the drain's (every second while it runs): who holds a device now, for /status and the
    holder gauges."""

    holders: tuple[Holder, ...]


# What a drain's thread reports to the loop; the two moments are the loop's to tell.
DrainReport: TypeAlias = ThreadReturned | RecordChanged | HoldersNow | HoldersFound | ProcessSignalled


@dataclass(frozen=True)
class DeadlineMoved:
    """The loop to the drain: the deadline now (monotonic); the drain takes it only if earlier."""

    deadline: float


@dataclass(frozen=True)
class Admission:
    """The loop to the drain: whether it may signal processes nobody signalled before (after a restart,
    not until the metadata server confirms the event)."""

    admit: bool


@dataclass(frozen=True)
class DrainOrder:
    """One drain to run: its plan, as far as the loop knows it (the deadline on the drain's monotonic clock,
    the ladder, dry run, the signals sent before, late, its id and start; the runner adds what its first
    scan finds: `scan_first`, `earlier`), for what (log wording), and what it goes on from."""

    cause: str  # the source of the event it serves, or "resumed" / "retry"
    plan: DrainPlan  # with its `deadline` (absolute), never a grace
    wall_deadline: float
    event_ids: tuple[str, ...]
    first_wave: tuple[Holder, ...] = ()  # from the warm index, re-checked (`first_wave`): signalled at once
    started_wall: float | None = None  # when the drain began (`ActiveDrain.started`): a resumed one keeps it
    on_file: tuple[SignalRecord, ...] = ()  # a resumed drain's signals in the state file (its own only)
    exits_on_file: tuple[ExitRecord, ...] = ()  # and how an earlier run saw its processes end
    previous: DrainRecord | None = None  # a reopened drain's record from when it ended (this run's)

    def __post_init__(self) -> None:
        if self.plan.deadline is None:
            raise ValueError("a drain order's plan has its deadline (absolute), not a grace")

    def first_intents(self) -> list[Intent]:
        """The intents of its first wave, which go in the write of the drain's own state: one write before
        the wave (only while newcomers are admitted: else the drain decides, and writes its own)."""
        ask, already = self.plan.ladder.ask.name, self.plan.already_signalled
        return [
            Intent(h.identity, ask, h.name, h.sigterm) for h in self.first_wave if h.identity not in already
        ]


class DrainRunner(DrainListener):
    """Starts drains (the loop's side) and is their listener (the drain thread's side). The loop's words to
    a running drain go through `move_deadline`, `admit` and `cancel_drain`: messages the drain takes on its
    next turn, woken for them (`wakeup`), never polling."""

    def __init__(
        self,
        config: Config,
        *,
        scanner: Scanner,
        store: StateStore,
        clock: Clock,
        stop: threading.Event,
        report: Callable[[DrainReport], None],
        persistence_changed: Callable[[], None],
        outputs: Outputs,
        processes: Callable[[], tuple[Signaller, ExitWaiter]] | None = None,
    ) -> None:
        """`report`: where the drain's thread reports (the loop's inbox). `processes`: each drain's
        signaller and exit waiter (a test's scripted world); None: pidfds."""
        self.processes = processes
        self.config, self.scanner, self.store = config, scanner, store
        self.outputs, self._report = outputs, report
        self.clock, self.stop = clock, stop
        self.writer = StateWriter(store, persistence_changed)  # the waves' writes, off the signal path
        self.cancel = threading.Event()  # the running drain's: a new one for each drain
        self.thread: threading.Thread | None = None
        self._admit = True  # what the loop last said
        self._to_drain: collections.deque[DeadlineMoved | Admission] = collections.deque()
        self.wakeup = Wakeup()  # one for the daemon's life: a drain polls it with its pidfds
        # The drain thread's own, set before it starts: its order, its deadline and admission as last told.
        self._order: DrainOrder | None = None
        self._deadline_now: float | None = None
        self._admits_now = True
        self._exits_kept: set[ProcessIdentity] = set()  # the ends the state file has (`_keep_exits`)

    @property
    def running(self) -> bool:
        return self.thread is not None

    @property
    def admit(self) -> bool:
        return self._admit

    @admit.setter
    def admit(self, admit: bool) -> None:
        if admit != self._admit:
            self._admit = admit
            self._tell_drain(Admission(admit))

    def move_deadline(self, deadline: float) -> None:
        """The drain's deadline now (monotonic); the drain takes it only if earlier (`DrainCore`)."""
        self._tell_drain(DeadlineMoved(deadline))

    def cancel_drain(self) -> None:
        """The event went away: the drain stops, and nothing is SIGKILLed from now on."""
        self.cancel.set()
        self.wakeup.ring()

    def _tell_drain(self, change: DeadlineMoved | Admission) -> None:
        self._to_drain.append(change)
        self.wakeup.ring()

    def order(
        self, cause: str, active: ActiveDrain | None, deadline: float, *, resume: bool, ladder: Ladder,
        possibly_signalled: frozenset[ProcessIdentity], indexed: HoldersScanned,
        last_record: DrainRecord | None,
    ) -> DrainOrder:  # fmt: skip
        """The lifecycle's drain (`active`, its `deadline` on the wall clock) as an order to run, with its
        first wave from the index (`indexed`). `resume` (or a late-arrival drain): the signals of this
        event's earlier drains, on file, still count. `last_record`: the last drain's record in this run: a
        reopened drain goes on from it."""
        already: dict[ProcessIdentity, dict[int, float]] = {}  # each signal and when it went (the file's)
        on_file = self.store.state.signals if resume and active is not None else ()
        for record in on_file:
            sent, at = already.setdefault(record.identity, {}), record.sent_at or record.intent_at
            sent.setdefault(int(signal.Signals[record.signal]), self._to_mono(at))
        first = self.first_wave(self._to_mono(deadline), indexed)
        started = None if active is None else self._to_mono(min(active.started, self.clock.wall()))
        plan = DrainPlan(
            deadline=self._to_mono(deadline), ladder=ladder, dry_run=self.config.dry_run,
            already_signalled=already, rescan_interval=RESCAN_INTERVAL, late=bool(active and active.late),
            possibly_signalled=possibly_signalled, started=started,
            drain_id=active.drain_id if active else "",
        )  # fmt: skip
        previous = None  # a reopened drain's record from when it ended in this run: it goes on from there
        if active is not None and active.late and last_record and last_record.drain_id == active.drain_id:
            previous = last_record
        mine = tuple(s for s in on_file if active and s.intent_at >= active.started)  # its own, not earlier
        signalled = {s.identity for s in mine}
        return DrainOrder(
            cause, plan, deadline, tuple(active.event_ids) if active else (), first,
            active.started if active else None, on_file=mine, previous=previous,
            exits_on_file=tuple(e for e in self.store.state.exits if e.identity in signalled),
        )  # fmt: skip

    def start(self, order: DrainOrder) -> None:
        """Run `order` in a new thread; it reports `ThreadReturned` at its end (None: the attempt failed)."""
        self.cancel = threading.Event()
        self._exits_kept = {e.identity for e in order.exits_on_file}
        self._to_drain.clear()  # the order has the deadline and admission as they are now
        self._order, self._deadline_now, self._admits_now = order, order.plan.deadline, self._admit
        # The loop has queued the write of the drain's own state (`StateWriter.save`) before this: the
        # drain's first write-ahead comes after it in the writer's queue, so a crash in between can never
        # leave a signal recorded for a drain the state file does not know.
        self.thread = self.clock.spawn(functools.partial(self._run, order), "drain")

    def finished(self) -> None:
        """The loop has taken the drain's result."""
        self.thread = None

    def join(self, timeout: float) -> None:
        if self.thread is not None:
            self.thread.join(timeout=timeout)

    def _run(self, order: DrainOrder) -> None:
        record: DrainRecord | None = None
        try:
            scan_first = bool(order.first_wave)  # else the holders come from a full scan
            holders = order.first_wave if scan_first else self._first_scan()
            self._said_started(order, holders)
            started, previous = order.plan.started, order.previous
            if previous is not None:  # reopened in this run: its start and processes as it ended
                started = previous.started
                earlier = tuple(copy.deepcopy(list(previous.processes.values())))
            else:
                ends = {e.identity: e for e in order.exits_on_file}
                earlier = earlier_processes(order.on_file, ends, holders, scan_first, self._to_mono)
            plan = replace(order.plan, scan_first=scan_first, started=started, earlier=earlier)
            signaller, exits = self.processes() if self.processes else (None, None)
            wake = self.wakeup if exits is None else None  # an injected waiter polls its own fds
            record = run_drain(
                holders, plan, scanner=self.scanner, listener=self, cancel=self.cancel, stop=self.stop,
                clock=self.clock, signaller=signaller, exits=exits, wake=wake,
            )  # fmt: skip
        except Exception:  # reported to the loop, which starts the drain again
            with self.outputs.guarded(Output.LOG):
                log.exception("the drain failed; starting it again with the same deadline")
        finally:
            self._flush()  # the loop's next write comes after the drain's
            self._report(ThreadReturned(record))

    def _to_mono(self, wall: float) -> float:
        return self.clock.monotonic() - (self.clock.wall() - wall)

    def _flush(self) -> None:
        if not self.writer.flush(FLUSH_WAIT):
            with self.outputs.guarded(Output.LOG):
                log.error("the drain's state-file writes are not done after %.0f s", FLUSH_WAIT)

    def _said_started(self, order: DrainOrder, holders: Sequence[Holder]) -> None:
        plan = order.plan
        ask = plan.ladder.ask.signum
        fresh = sum(ask not in plan.already_signalled.get(h.identity, ()) for h in holders)
        self._report(HoldersFound(
            order.cause, plan.drain_id, plan.late, len(holders), fresh, plan.ladder, plan.dry_run,
            order.started_wall, order.wall_deadline, self.clock.wall(),
        ))  # fmt: skip

    def first_wave(self, deadline: float, indexed: HoldersScanned) -> tuple[Holder, ...]:
        """The holders a drain signals at once, without a scan of every fd on the host: the holders of the
        index's last scan (`indexed`) still holding a device, re-checked, and the holders among the PIDs it
        has not seen (a job started since). A few reads per indexed holder plus a look at the new PIDs, in the
        caller's thread (the loop's: their intents go in the drain's own state write). () when there are
        none, the scanner can do neither (a test's), or the deadline (monotonic) has passed: then the full
        scan decides who is killed. A failed look only costs the head start: the full scan follows."""
        if deadline <= self.clock.monotonic():
            return ()
        wave: list[Holder] = []
        recheck: Callable[[Sequence[Holder]], Sequence[Holder]] | None
        recheck = getattr(self.scanner, "recheck", None)
        if recheck is not None:
            try:
                wave += recheck(indexed.holders) if indexed.holders else ()
            except Exception:
                with self.outputs.guarded(Output.LOG):
                    log.exception("re-checking the indexed holders failed; scanning them all")
        newcomers: Callable[[Collection[int], int | None], Sequence[Holder]] | None
        newcomers = getattr(self.scanner, "newcomers", None)
        if newcomers is not None:
            try:
                taken = {h.identity for h in wave}
                found = newcomers(indexed.pids, indexed.last_pid) if indexed.pids else ()
                wave += [h for h in found if h.identity not in taken]
            except Exception:
                with self.outputs.guarded(Output.LOG):
                    log.exception("scanning the processes the index has not seen failed; scanning them all")
        return tuple(wave)

    def _first_scan(self) -> tuple[Holder, ...]:
        """The drain's first scan, tried a few times: a passing /proc error must not skip a drain."""
        for attempt in range(FIRST_SCAN_TRIES):
            try:
                holders = tuple(self.scanner.scan().holders)
            except Exception:  # logged; tried again, then the drain attempt fails
                with self.outputs.guarded(Output.LOG):
                    log.exception("scan %d of %d for the drain failed", attempt + 1, FIRST_SCAN_TRIES)
                if attempt + 1 == FIRST_SCAN_TRIES or self.clock.wait(0.2, self.stop.wait):
                    raise
                continue
            self._report(HoldersNow(holders))
            return holders
        raise AssertionError("unreachable")  # pragma: no cover

    # -- the drain's listener (called in the drain thread) ------------------------------------------------

    def before_signals(self, intents: Sequence[tuple[ProcessIdentity, int]], record: DrainRecord) -> None:
        """Write-ahead for a wave of signals: one write, after the drain's own state (the writer's queue)."""
        if not self.writer.intents([_intent(record, i, signum) for i, signum in intents]):
            with self.outputs.guarded(Output.LOG):
                log.error("the state file was not written within %.1f s; signalling anyway", WRITE_AHEAD_WAIT)

    def after_signals(
        self, sent: Sequence[tuple[ProcessIdentity, int, SignalResult]], record: DrainRecord
    ) -> None:
        self.writer.sents([(i, signum, result.value) for i, signum, result in sent])
        for identity, signum, result in sent:
            self._said_sent(identity, signum, result, record)

    def _said_sent(
        self, identity: ProcessIdentity, signum: int, result: SignalResult, record: DrainRecord
    ) -> None:
        """One signal sent: reported to the loop, which tells the subscribers (its counter, its log line)."""
        order = self._order
        drain_id, event_ids = (order.plan.drain_id, order.event_ids) if order else ("", ())
        proc = record.processes.get(identity)
        self._report(ProcessSignalled(
            identity, _name(record, identity), signum, result, drain_id, event_ids,
            late=bool(proc and proc.late_arrival), workload=proc.workload if proc else None,
            dry_run=self.config.dry_run,
        ))  # fmt: skip

    def updated(self, record: DrainRecord) -> None:
        self._keep_exits(record)
        if record.outcome is not None:
            self._flush()  # the drain's end is shown, and taken by the loop, once its writes are done
        self._report(RecordChanged(record))

    def _keep_exits(self, record: DrainRecord) -> None:
        """How each signalled process ended (exited, with its status, or released the device), written
        behind as the drain publishes it, never waited for (the writer puts a burst in one write): a run
        that resumes the drain after a restart tells those ends as they were, not as unseen ("before the
        restart")."""
        ends = []
        for identity, proc in record.processes.items():
            if identity in self._exits_kept or proc.ended_at is None or not proc.signals:
                continue
            if proc.end in (End.EXITED, End.RELEASED):
                status = proc.exit_status or UNKNOWN_EXIT
                at = record.wall(proc.ended_at)
                ends.append(ExitRecord(identity, proc.end.value, at, status.code, status.signal))
        if ends:
            self._exits_kept.update(e.identity for e in ends)
            self.writer.exits(ends)

    def scanned(self, holders: Sequence[Holder]) -> None:
        self._report(HoldersNow(tuple(holders)))

    def deadline(self) -> float | None:
        self._take_changes()
        return self._deadline_now

    def admits_newcomers(self) -> bool:
        self._take_changes()
        return self._admits_now

    def _take_changes(self) -> None:
        """What the loop said since the drain last looked, in order (the drain's thread)."""
        while self._to_drain:
            change = self._to_drain.popleft()
            if isinstance(change, DeadlineMoved):
                self._deadline_now = change.deadline
            else:
                self._admits_now = change.admit


def earlier_processes(
    on_file: Sequence[SignalRecord], ends: Mapping[ProcessIdentity, ExitRecord], holders: Sequence[Holder],
    exited_only: bool, to_mono: Callable[[float], float],
) -> tuple[ProcessRecord, ...]:  # fmt: skip
    """A resumed drain's processes that an earlier run signalled and that hold no device now: exited or,
    still running, released it; when and how as that run saw it (`ends`, the state file's), else unseen
    (it ended while the daemon was down). `exited_only`: the holders came from the warm index, not a full
    scan, so a running one may still hold a device (the scan decides). Their signals keep the times the
    file has (`to_mono`: a wall time on the drain's clock)."""
    held = {h.identity for h in holders}
    grouped: dict[ProcessIdentity, list[SignalRecord]] = {}
    for s in on_file:
        if s.identity not in held:
            grouped.setdefault(s.identity, []).append(s)
    found = []
    for identity, records in grouped.items():
        running = start_time(identity.pid) == identity.start_time
        if running and exited_only:
            continue
        proc = ProcessRecord(identity, records[0].name, (), first_seen=0.0)
        for r in records:
            result = SignalResult(r.result or SignalResult.SENT.value)  # an intent: it may have gone
            at = to_mono(r.sent_at or r.intent_at)
            proc.signals.append(SentSignal(int(signal.Signals[r.signal]), at, result))
        proc.end = End.RELEASED if running else End.EXITED
        proc.exit_status = None if running else UNKNOWN_EXIT
        seen = ends.get(identity)
        if seen is not None and seen.end == proc.end.value:  # as the earlier run saw it end
            proc.ended_at = to_mono(seen.at)
            proc.exit_status = None if running else ExitStatus(seen.code, seen.signal)
        # Its disposition as written ahead: one that had none (SIGTERM at its default) died of it, unsaved.
        proc.sigterm = next((r.sigterm for r in records if r.sigterm is not None), None)
        found.append(proc)
    return tuple(found)


def _intent(record: DrainRecord, identity: ProcessIdentity, signum: int) -> Intent:
    """The write-ahead of `signum` to `identity`, with what the record knows of it (name, disposition)."""
    proc = record.processes.get(identity)
    return Intent(identity, signum, proc.name if proc else "", proc.sigterm if proc else None)


def _name(record: DrainRecord, identity: ProcessIdentity) -> str:
    proc = record.processes.get(identity)
    return proc.name if proc is not None else ""
