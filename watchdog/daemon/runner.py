"""The daemon's drains, one at a time, run on the loop: the drain's side of the daemon.

The loop decides (the lifecycle); the runner carries out what it decided, as a `Draining` (the edge around
the pure `DrainCore`) that the loop drives: each of the runner's calls (`start`, `exited`, `scanned`,
`written`, `step`, `stopping`) takes what happened and answers what the drain has to say (its holders
found, each signal, its record as it changes, its scans, the end of an attempt: `DrainReport`s), which the
loop tells and shows. Nothing of a drain blocks the loop: its pidfds are on the loop's poll (`wait`), its
scans are made by the scanning thread (`ask_scan`, answered as `HoldersScanned` in the inbox), and a wave of
signals whose write-ahead is still under way is held, not waited for: it goes when the state writer says
the write carrying it is done (`written`) or WRITE_AHEAD_WAIT has passed.

A drain starts from the warm holder index, in the loop (`first_wave`): the indexed holders (`indexed`: the
holders of its last scan, refreshed while idle), each re-checked from its own /proc entries (same process,
still holding a device), and the holders among the processes the index has not seen (`known_pids`: a job
started since its last scan), scanned alone. The loop writes their intents with the drain's own state, and
the drain signals them all at once, when that write is done: the first SIGTERM, a new job's included, waits
for neither a scan of every fd on the host nor a second write. Then the full scan (an old process that
opened a device since), and its newcomers are signalled as before. With no index yet, the drain starts from
a full scan.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import signal
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeAlias

from watchdog.config.settings import Config
from watchdog.core.clock import Clock
from watchdog.core.drain import FIRST_SCAN_RETRY, DrainCore, DrainPlan
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
from watchdog.daemon.draining import (
    POLL_CAP,
    WRITE_AHEAD_WAIT,
    Draining,
    DrainListener,
    ExitWaiter,
    Scanner,
    Signaller,
)
from watchdog.daemon.inbox import Inbox
from watchdog.daemon.index import HoldersScanned
from watchdog.daemon.outputs import Outputs
from watchdog.daemon.writeahead import StateWriter
from watchdog.host.exits import PidfdExitWaiter, Wakeup
from watchdog.host.procfs import start_time
from watchdog.host.signals import DryRunSignaller, PidfdSignaller, ProcessHandles
from watchdog.store.records import ExitRecord, Intent, SignalRecord
from watchdog.store.statefile import StateStore

log = logging.getLogger("tpu-watchdog")

RESCAN_INTERVAL = 1.0  # s between scans while an event is on: a drain's rescans, and the late-arrival watch
FIRST_SCAN_TRIES = 3  # a drain's first scan is tried this often (0.2 s apart) before the attempt fails


@dataclass(frozen=True)
class AttemptEnded:
    """A drain's attempt ended: the drain's record, for the loop to take (the `DrainEnded` moment is told
    from it), or None: the attempt failed (or was stopped before its first scan), and it is started again."""

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


# What a drain has to say, for the loop to show and tell; the two moments are the loop's to tell.
DrainReport: TypeAlias = AttemptEnded | RecordChanged | HoldersNow | HoldersFound | ProcessSignalled


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
    """Runs the loop's drains (one at a time) and is their listener. The loop's words to a running drain
    (`move_deadline`, `admit`, `cancel_drain`) are taken on its next turn, in the loop's own thread."""

    def __init__(
        self,
        config: Config,
        *,
        store: StateStore,
        clock: Clock,
        stop: threading.Event,
        ask_scan: Callable[[], int],
        wakeup: Wakeup,
        persistence_changed: Callable[[], None],
        outputs: Outputs,
        scanner: Scanner | None = None,
        processes: Callable[[], tuple[Signaller, ExitWaiter]] | None = None,
    ) -> None:
        """`ask_scan`: has a full scan made, off the loop; its ticket (the `HoldersScanned` that answers
        it carries a ticket as large). `wakeup`: the loop's inbox's, polled with the drain's pidfds.
        `scanner`: only for the first wave's look (`first_wave`: its `recheck`, `newcomers`).
        `processes`: each drain's signaller and exit waiter (a test's scripted world); None: pidfds."""
        self.processes = processes
        self.config, self.scanner, self.store = config, scanner, store
        self.outputs, self.ask_scan, self.wakeup = outputs, ask_scan, wakeup
        self.clock, self.stop = clock, stop
        # The waves' writes, off the signal path; its thread is the clock's (a test's time holds meanwhile).
        self.writer = StateWriter(store, persistence_changed, spawn=clock.spawn)
        self.cancel = threading.Event()  # the running drain's: a new one for each drain
        self.draining: Draining | None = None  # the running drain, once it has its holders
        self._order: DrainOrder | None = None  # the running drain's order, from `start` to its end
        self.admit = True  # whether the drain may signal processes nobody signalled before (the loop's)
        self._deadline_now: float | None = None  # the running drain's deadline as the loop last said
        self._reports: list[DrainReport] = []  # what the drain said during the call, for the loop
        self._handles: ProcessHandles | None = None  # the running drain's pidfds, when they are ours
        self._first_scan: int | None = None  # the ticket of the first scan it waits for
        self._first_tries = 0
        self._first_retry: float | None = None  # when the failed first scan is asked again
        self._rescan: int | None = None  # the ticket of the rescan it waits for
        self._held: int | None = None  # the ticket of the write a held wave waits for
        self._exits_kept: set[ProcessIdentity] = set()  # the ends the state file has (`_keep_exits`)

    @property
    def running(self) -> bool:
        return self._order is not None

    @property
    def holding(self) -> bool:
        """A wave of signals is held for its write-ahead (the loop tells nothing until it is out)."""
        return self.draining is not None and bool(self.draining.held)

    def move_deadline(self, deadline: float) -> None:
        """The drain's deadline now (monotonic); the drain takes it only if earlier (`DrainCore`)."""
        self._deadline_now = deadline

    def cancel_drain(self) -> None:
        """The event went away: the drain stops, and nothing is SIGKILLed from now on."""
        self.cancel.set()

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

    def start(self, order: DrainOrder) -> list[DrainReport]:
        """Start `order`: its first wave at once (its intents ride in the loop's save, queued before this),
        else a full scan first. It reports `AttemptEnded` at its end (None: the attempt failed)."""
        self.cancel = threading.Event()
        self._exits_kept = {e.identity for e in order.exits_on_file}
        self._order, self._deadline_now = order, order.plan.deadline
        self._first_tries, self._first_retry, self._rescan, self._held = 0, None, None, None
        with self._attempt():
            if order.first_wave:
                self._begin(order, order.first_wave, scan_first=True)
            else:
                self._first_scan = self.ask_scan()
        return self._take()

    def scanned(self, scan: HoldersScanned) -> list[DrainReport]:
        """A full scan came in: the drain's first, or the rescan it asked for (an older one is not its)."""
        order = self._order
        if order is None:
            return []
        with self._attempt():
            if self._first_scan is not None and scan.ticket >= self._first_scan:
                self._first_scan = None
                self._first_scanned(order, scan)
            elif self.draining is not None and self._rescan is not None and scan.ticket >= self._rescan:
                self._rescan = None
                holders = None if scan.error else scan.holders
                self.draining.scanned(holders, scan.error)
        return self._take()

    def _first_scanned(self, order: DrainOrder, scan: HoldersScanned) -> None:
        """The drain's first scan, tried a few times: a passing /proc error must not skip a drain."""
        if not scan.error:
            self._reports.append(HoldersNow(scan.holders))
            self._begin(order, scan.holders, scan_first=False)
            return
        self._first_tries += 1
        with self.outputs.guarded(Output.LOG):
            tries = self._first_tries
            log.error("scan %d of %d for the drain failed: %s", tries, FIRST_SCAN_TRIES, scan.error)
        if self._first_tries >= FIRST_SCAN_TRIES:
            raise RuntimeError(f"the drain's first scan failed {FIRST_SCAN_TRIES} times")
        self._first_retry = self.clock.monotonic() + FIRST_SCAN_RETRY

    def exited(self, exited: Sequence[tuple[ProcessIdentity, ExitStatus]]) -> list[DrainReport]:
        """Exits the loop's poll saw."""
        if self.draining is not None and exited:
            with self._attempt():
                self.draining.exited(exited)
        return self._take()

    def written(self) -> list[DrainReport]:
        """The state writer wrote: a wave held for its write-ahead goes if that write is done."""
        if self.draining is not None and self.draining.held and self.writer.written(self._held):
            with self._attempt():
                self._held = None
                self.draining.release()
        return self._take()

    def step(self) -> list[DrainReport]:
        """The drain's turn, once per turn of the loop: what changed (deadline, cancel, stop), what is due
        (a held wave's time, a rescan, the deadline), its record published; its end, once it is done."""
        now = self.clock.monotonic()
        with self._attempt():
            if self._first_retry is not None and now >= self._first_retry:
                self._first_retry, self._first_scan = None, self.ask_scan()
            elif self._order is not None and self.draining is None and self.stop.is_set():
                self._end(None)  # stopped before it had its holders: the next start resumes it
            draining = self.draining
            if draining is not None:
                draining.turn()
                if draining.wants_scan():
                    self._rescan = self.ask_scan()
                draining.publish(final=draining.done)
                if draining.done:
                    self._end(draining.record)
        return self._take()

    def stopping(self) -> list[DrainReport]:
        """The daemon is stopping: a held wave goes once its write is done (at most WRITE_AHEAD_WAIT; its
        SIGTERMs, never a SIGKILL), the drain ends as interrupted, its last record published."""
        if self.draining is not None and self.draining.held:
            self.writer.flush(WRITE_AHEAD_WAIT)
            self.draining.release()
        return self.step()

    def next_due(self, now: float) -> float | None:
        """When the drain next wants a turn (monotonic), or None: it waits for a message only."""
        if self._first_retry is not None:
            return self._first_retry
        if self.draining is None:
            return None
        timeout = self.draining.timeout()
        return None if timeout == float("inf") else now + timeout  # inf: a scan's answer is what it waits for

    def wait(self, seconds: float, inbox: Inbox[Any]) -> list[tuple[ProcessIdentity, ExitStatus]]:
        """The loop's wait: up to `seconds` for a message in `inbox` or, while a drain runs, the exit of
        one of its processes (one poll(2), the inbox's eventfd with the pidfds); the exits seen."""
        draining = self.draining
        if draining is None:
            inbox.wait(seconds)
            return []
        if self._handles is None:  # a test's exit waiter polls its own fds: the inbox is looked at after
            return draining.exits.wait(min(seconds, POLL_CAP))
        return draining.exits.wait(seconds)

    def _begin(self, order: DrainOrder, holders: Sequence[Holder], scan_first: bool) -> None:
        self._said_started(order, holders)
        started, previous = order.plan.started, order.previous
        if previous is not None:  # reopened in this run: its start and processes as it ended
            started = previous.started
            earlier = tuple(copy.deepcopy(list(previous.processes.values())))
        else:
            ends = {e.identity: e for e in order.exits_on_file}
            earlier = earlier_processes(order.on_file, ends, holders, scan_first, self._to_mono)
        plan = replace(order.plan, scan_first=scan_first, started=started, earlier=earlier)
        if self.processes is not None:
            signaller, exits = self.processes()
        else:
            self._handles = ProcessHandles()
            signaller = DryRunSignaller(self._handles) if plan.dry_run else PidfdSignaller(self._handles)
            exits = PidfdExitWaiter(self._handles, wake=self.wakeup)
        if signaller.dry_run and not plan.dry_run:
            plan = replace(plan, dry_run=True)  # a signaller that sends nothing: the record says so
        if plan.dry_run and not signaller.dry_run:
            raise ValueError("dry_run=True needs a dry-run signaller: refusing to send real signals")
        core = DrainCore(holders, plan, now=self.clock.monotonic(), now_wall=self.clock.wall())
        self.draining = Draining(core, signaller, exits, self.clock, self, self.cancel, self.stop)
        self.draining.start()

    def _end(self, record: DrainRecord | None) -> None:
        """The attempt is over: its pidfds closed, and the loop told (`AttemptEnded`)."""
        draining, handles = self.draining, self._handles
        self.draining, self._handles, self._order = None, None, None
        self._first_scan = self._first_retry = self._rescan = self._held = None
        try:
            if draining is not None:
                draining.close()
            if handles is not None:
                handles.close()
        except Exception:  # a pidfd that will not close must not keep the loop from hearing the end
            with self.outputs.guarded(Output.LOG):
                log.exception("closing the drain's pidfds failed")
        self._reports.append(AttemptEnded(record))

    @contextlib.contextmanager
    def _attempt(self) -> Iterator[None]:
        """A bug in a drain's step ends the attempt, and the loop starts it again with the same deadline
        (`AttemptEnded(None)`): it never takes the loop down with it."""
        try:
            yield
        except Exception:
            with self.outputs.guarded(Output.LOG):
                log.exception("the drain failed; starting it again with the same deadline")
            if self._order is not None:
                self._end(None)

    def _take(self) -> list[DrainReport]:
        reports, self._reports = self._reports, []
        return reports

    def _to_mono(self, wall: float) -> float:
        return self.clock.monotonic() - (self.clock.wall() - wall)

    def _said_started(self, order: DrainOrder, holders: Sequence[Holder]) -> None:
        plan = order.plan
        ask = plan.ladder.ask.signum
        fresh = sum(ask not in plan.already_signalled.get(h.identity, ()) for h in holders)
        self._reports.append(HoldersFound(
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

    # -- the drain's listener (called by `Draining`, in the loop) ------------------------------------------

    def before_signals(self, intents: Sequence[tuple[ProcessIdentity, int]], record: DrainRecord) -> bool:
        """Write-ahead for a wave of signals: one write, after the drain's own state (the writer's queue).
        True when they are on file; else the wave is held until that write is done (`written`)."""
        ticket = self.writer.intents([_intent(record, i, signum) for i, signum in intents])
        if self.writer.written(ticket):
            return True
        self._held = ticket
        return False

    def held_too_long(self) -> None:
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
        """One signal sent: for the loop to tell (its counter, its log line)."""
        order = self._order
        drain_id, event_ids = (order.plan.drain_id, order.event_ids) if order else ("", ())
        proc = record.processes.get(identity)
        self._reports.append(ProcessSignalled(
            identity, _name(record, identity), signum, result, drain_id, event_ids,
            late=bool(proc and proc.late_arrival), workload=proc.workload if proc else None,
            dry_run=self.config.dry_run,
        ))  # fmt: skip

    def updated(self, record: DrainRecord) -> None:
        self._keep_exits(record)
        self._reports.append(RecordChanged(record))

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

    def holders_seen(self, holders: Sequence[Holder]) -> None:
        self._reports.append(HoldersNow(tuple(holders)))

    def deadline(self) -> float | None:
        return self._deadline_now

    def admits_newcomers(self) -> bool:
        return self.admit


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
