"""The drain as a state machine: who to signal, with what, when; when the drain is over; what happened.

Pure: it is fed observations (a scan of the holders, a process's exit, the result of a signal, the time) and
answers with actions (`SendSignal`) for the edge (`watchdog/daemon/draining.py`) to carry out. It owns
the record. No I/O and no clock reads, so every transition is tested without processes or waiting.

It walks the plan's signal ladder (`watchdog.core.ladder`): the asking step (SIGTERM) to each holder when it
is found, then at the deadline the forcing step (SIGKILL), or none. Phases: WAITING (holders got the asking
signal; wait for them to exit, rescanning for newcomers), then at the deadline either KILLING (SIGKILL what
still holds a device, wait a bounded time for it to vanish, rescanning still) or, on a ladder without a
forcing step (on_timeout="leave"), straight to DONE. Times are monotonic seconds of the caller's clock.

Newcomers (a process that opens a device after the first wave: a job supervisor restarting the job) get
their one SIGTERM when a scan finds them, and SIGKILL at the same deadline; one found after the deadline
(the KILLING phase included: rescans go on while SIGKILL's targets die) gets SIGTERM and, on "kill", SIGKILL
in the same wave (what still holds a device at the deadline is killed). The
edge may hold newcomers back (`admit_new=False`: after a restart, until the metadata server confirms the event
is still on): they are not signalled, and the drain waits for them while the deadline is ahead.

Started from the warm holder index (`scan_first`: the indexed holders, re-checked, and the holders among the
processes the index had not seen): they get their SIGTERM at once, and a full scan follows straight away;
until it has looked the drain is not over, and whom it finds are no late arrivals.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from watchdog.core.drain_record import (
    UNKNOWN_EXIT,
    DrainRecord,
    End,
    ExitStatus,
    ProcessRecord,
    SentSignal,
    SignalResult,
)
from watchdog.core.ladder import DEFAULT_LADDER, At, Ladder
from watchdog.core.process import Holder, ProcessIdentity
from watchdog.core.vocabulary import DEFAULT_MAINTENANCE_GRACE, OnTimeout, Outcome

__all__ = [
    "DrainCore",
    "DrainPlan",
    "DrainRecord",
    "End",
    "ExitStatus",
    "Ladder",
    "OnTimeout",
    "Outcome",
    "Phase",
    "ProcessRecord",
    "SendSignal",
    "SignalResult",
]


FIRST_SCAN_RETRY = 0.2  # s between tries of the full scan that follows a start from the warm index


class Phase(str, enum.Enum):
    WAITING = "waiting"
    KILLING = "killing"
    DONE = "done"


@dataclass(frozen=True)
class SendSignal:
    """Action: signal this process (the edge calls on_intent first, then sends, then reports the result).
    `at`: the ladder's step it carries out (a SIGKILL at the deadline is never sent once stopping)."""

    identity: ProcessIdentity
    signum: int
    at: At


@dataclass(frozen=True)
class DrainPlan:
    """What a drain is to do: the one specification of a drain, from the edge that starts it to the state
    machine that walks it. `ladder`: which signals go out, and when (`watchdog.core.ladder`; the default asks
    with SIGTERM and kills at the deadline). The deadline is `deadline` (absolute, monotonic seconds of the
    drain's clock: resuming a drain) or, without one, `grace` seconds from the start (default: the
    maintenance grace).
    `already_signalled`: the signals an earlier run (or an earlier drain of the same event) sent each
    process, as signal numbers, or as signal number -> when it went (monotonic; None when unknown): SIGTERM
    is never sent twice; SIGKILL still goes out on time. `dry_run` sends nothing (signal 0 checks).
    `late`: a drain for late arrivals (see `watchdog.core.lifecycle`). `scan_first`: the holders came from
    the warm index (re-checked, and the new PIDs scanned alone): they are signalled at once, and a full
    scan follows straight away. `possibly_signalled`: of those, the SIGTERMs on file only as intents: held
    back until admitted. `started`: when the drain began, if before its start here (a drain resumed after
    a restart keeps its start, so its duration and every offset count from there). `earlier`: its
    processes that an earlier run signalled and that no longer hold a device (they ended while the daemon
    was down): in the record from the start, so every surface counts the same processes."""

    grace: float | None = None
    deadline: float | None = None
    ladder: Ladder = DEFAULT_LADDER
    dry_run: bool = False
    already_signalled: Mapping[ProcessIdentity, Collection[int]] = field(default_factory=dict)
    rescan_interval: float = 1.0
    kill_wait: float = 10.0
    late: bool = False
    scan_first: bool = False
    possibly_signalled: frozenset[ProcessIdentity] = frozenset()
    started: float | None = None  # monotonic
    earlier: Sequence[ProcessRecord] = ()
    drain_id: str = ""  # the lifecycle's id of the drain, carried by its record

    def __post_init__(self) -> None:
        if self.grace is not None and self.deadline is not None:
            raise ValueError("give either grace (relative) or deadline (absolute), not both")
        if self.grace is not None and not self.grace >= 0:
            raise ValueError(f"grace must be >= 0 s, not {self.grace!r}")
        if not self.rescan_interval > 0:
            raise ValueError(f"rescan_interval must be > 0 s, not {self.rescan_interval!r}")
        if not self.kill_wait >= 0:
            raise ValueError(f"kill_wait must be >= 0 s, not {self.kill_wait!r}")

    @property
    def on_timeout(self) -> OnTimeout:
        return self.ladder.on_timeout


class DrainCore:
    """The drain's decisions. Call `start()` once, then feed observations until `done`."""

    def __init__(self, holders: Iterable[Holder], plan: DrainPlan, *, now: float, now_wall: float) -> None:
        """`now`, `now_wall`: when this run of the drain starts, on the monotonic and the wall clock."""
        grace = DEFAULT_MAINTENANCE_GRACE if plan.grace is None else plan.grace
        deadline = plan.deadline if plan.deadline is not None else now + grace
        began = now if plan.started is None else min(plan.started, now)
        self.record = DrainRecord(
            started=began, started_wall=now_wall - (now - began), deadline=deadline,
            on_timeout=plan.on_timeout, dry_run=plan.dry_run, late=plan.late, drain_id=plan.drain_id,
        )  # fmt: skip
        self._now = now  # when this run of the drain starts (`start`)
        self._ladder = plan.ladder
        self.phase = Phase.WAITING
        self._initial = list(
            {h.identity: h for h in holders}.values()
        )  # a duplicate is never signalled twice
        self._already = {i: set(s) for i, s in plan.already_signalled.items()}
        # When each was sent, where known (`already_signalled` maps signum -> monotonic time): the record
        # shows an earlier run's signals at their times, as the history does.
        self._sent_at = {i: dict(s) for i, s in plan.already_signalled.items() if isinstance(s, Mapping)}
        # SIGTERM intents on file never confirmed sent (a crash between the write-ahead and the send): never
        # SIGTERMed again, and held back like newcomers until the event is confirmed (no SIGKILL before).
        self._unsure = set(plan.possibly_signalled)
        self._rescan_interval = plan.rescan_interval
        self._kill_wait = plan.kill_wait
        self._last_scan = now
        self._kill_deadline: float | None = None
        self._pending: dict[ProcessIdentity, None] = {}  # record.pending(), kept as it changes (500 holders)
        held = {h.identity for h in self._initial}
        for proc in plan.earlier:
            if proc.identity not in held and not proc.pending:
                self.record.processes[proc.identity] = proc
        self._held_back: set[ProcessIdentity] = set()  # newcomers seen by the last scan and not admitted
        self._said_held_back = False
        # The holders came from the warm index (signalled at once, re-checked): a full scan is due right after
        # their SIGTERMs, and the drain cannot end before it has looked (its holders are not late arrivals).
        self._awaiting_scan = plan.scan_first
        self._scan_tried = False

    @property
    def done(self) -> bool:
        return self.phase is Phase.DONE

    def pending(self) -> list[ProcessIdentity]:
        """Processes still waited for: the edge watches these for exit."""
        return list(self._pending)

    def start(self, admit_new: bool = True) -> list[SendSignal]:
        """The first actions: the asking signal to every holder not yet sent it (past the deadline, the kill).
        `admit_new=False`: only processes an earlier run signalled are taken on; the others wait."""
        now = self._now
        if now >= self.record.deadline and self._awaiting_scan:
            return []  # past the deadline the full scan decides it all (the kill included)
        if now >= self.record.deadline:
            return self.observe_scan(self._initial, running=(), now=now, admit_new=admit_new)
        actions: list[SendSignal] = []
        for holder in self._initial:
            if not self._waits(holder.identity, admit_new):
                # Resuming after signals went out: anyone not signalled came after the first wave.
                late = self.record.late or bool(self._already and holder.identity not in self._already)
                action = self._track(holder, now, late=late)
                actions += [action] if action is not None else []
            else:
                self._held_back.add(holder.identity)
        self._note_held_back()
        if not self._pending and not self._held_back and not self._awaiting_scan:
            self._finish(Outcome.EXITED if self.record.processes else Outcome.NO_HOLDERS, now)
        return actions

    def observe_signal(
        self, identity: ProcessIdentity, signum: int, result: SignalResult, now: float
    ) -> None:
        """The edge tried to send `signum`; record what happened."""
        proc = self.record.processes.get(identity)
        if proc is None:
            return
        was_signalled = any(s.result is SignalResult.SENT for s in proc.signals)
        proc.signals.append(SentSignal(signum, now, result))
        if proc.pending and result is SignalResult.PROTECTED:
            self._end(proc, End.PROTECTED, now)
        elif proc.pending and result in (SignalResult.GONE, SignalResult.IDENTITY_CHANGED):
            # Signalled before and now gone: it exited (how is unknown unless the exit is reported too).
            if was_signalled:
                self._end(proc, End.EXITED, now, UNKNOWN_EXIT)
            else:
                self._end(proc, End.GONE if result is SignalResult.GONE else End.IDENTITY_CHANGED, now)
        self._settle(now)

    def observe_exit(self, identity: ProcessIdentity, status: ExitStatus, now: float) -> None:
        """A watched process exited (its pidfd became readable)."""
        proc = self.record.processes.get(identity)
        if proc is None:
            return
        if proc.pending:
            self._end(proc, End.EXITED, now, status)
        elif proc.end is End.EXITED and not (proc.exit_status and proc.exit_status.known):
            proc.exit_status = status
        self._settle(now)

    def wants_scan(self, now: float) -> bool:
        """True when a rescan is due: every `rescan_interval` (killing too), and once at the deadline."""
        if self.phase is Phase.KILLING:
            return now >= self._last_scan + self._rescan_interval
        if self.phase is not Phase.WAITING:
            return False
        if self._awaiting_scan:
            return not self._scan_tried or now >= self._last_scan + FIRST_SCAN_RETRY
        return now >= self.record.deadline or now >= self._last_scan + self._rescan_interval

    def timeout(self, now: float, scanning: bool = False) -> float:
        """Seconds until something is due (a scan, the deadline, the end of the kill wait). `scanning`: a
        scan is under way, and its answer is what the drain waits for next (the deadline's included)."""
        inf = float("inf")
        if self.phase is Phase.WAITING and self._awaiting_scan:
            due = inf if scanning else (self._last_scan + FIRST_SCAN_RETRY if self._scan_tried else now)
        elif self.phase is Phase.WAITING:
            due = inf if scanning else min(self._last_scan + self._rescan_interval, self.record.deadline)
        elif self.phase is Phase.KILLING and self._kill_deadline is not None:
            rescan = inf if scanning else self._last_scan + self._rescan_interval
            due = min(self._kill_deadline, rescan)
        else:
            return 0.0
        return max(0.0, due - now)

    def observe_scan(
        self,
        holders: Sequence[Holder] | None,
        running: Collection[ProcessIdentity],
        now: float,
        admit_new: bool = True,
    ) -> list[SendSignal]:
        """A rescan: `holders` now holding a device (None: the scan failed), and `running`: pending
        processes missing from the scan that are confirmed alive and not exiting: they released the device.
        `admit_new=False` holds back holders no run of the daemon has signalled yet."""
        if self.phase is Phase.KILLING:
            return self._scan_while_killing(holders or (), now, admit_new)
        if self.phase is not Phase.WAITING:
            return []
        self._last_scan = now
        first = self._awaiting_scan
        self._scan_tried = True
        if holders is not None:
            self._awaiting_scan = False  # looked at everything: newcomers from now on are late arrivals
        actions: list[SendSignal] = []
        seen = {h.identity for h in holders} if holders is not None else set()
        past_deadline = now >= self.record.deadline
        if holders is not None:
            self._held_back.clear()
        for h in holders or ():
            proc = self.record.processes.get(h.identity)
            if proc is None:
                if self._waits(h.identity, admit_new):
                    self._held_back.add(h.identity)
                    continue
                late = self.record.late or (now > self._now and not first)
                action = self._track(h, now, late=late)
                if action is not None:
                    actions.append(action)
            elif proc.end is End.RELEASED:
                self._reopened(proc)
        if holders is not None:
            for identity in list(self._pending):
                if identity not in seen and identity in running:
                    self._end(self.record.processes[identity], End.RELEASED, now)
        self._note_held_back()
        if past_deadline:
            self._held_back.clear()  # the deadline passed unconfirmed: they are never signalled
        if past_deadline and self._pending:
            actions += self._deadline(seen if holders is not None else set(running), now)
        if first and holders is not None and not self.record.processes and not self._held_back:
            self._finish(Outcome.NO_HOLDERS, now)  # the indexed holders had gone, and nobody else holds one
        self._settle(now)
        return actions

    def move_deadline(self, deadline: float, now: float) -> bool:
        """An earlier deadline (a preemption arrives during a maintenance drain). Never a later one: the
        deadline of a drain only ever comes closer. True when it moved."""
        if self.phase is not Phase.WAITING or not deadline < self.record.deadline:
            return False
        self.record.notes.append(f"deadline moved {self.record.deadline - deadline:.1f} s earlier")
        self.record.deadline = deadline
        self._settle(now)
        return True

    def observe_time(self, now: float) -> None:
        """Time passed: ends the kill wait when its bound is reached."""
        self._settle(now)

    def cancel(self, now: float) -> None:
        """The event went away: stop; nothing is SIGKILLed from now on. Once a SIGKILL went out the outcome
        stays timed_out (it is what happened); the wait just ends."""
        if self.done:
            return
        if not any(p.killed for p in self.record.processes.values()):
            self._finish(Outcome.CANCELLED, now)
        else:
            self.record.notes.append("cancelled during the wait after SIGKILL")
            self._finish(Outcome.TIMED_OUT, now)

    def interrupt(self, now: float) -> None:
        """The daemon is stopping: end now; a later drain resumes with the same deadline."""
        if not self.done:
            self._finish(Outcome.INTERRUPTED, now)

    # -- internals --

    def _track(self, holder: Holder, now: float, late: bool = False) -> SendSignal | None:
        """Start recording a holder; send it the asking signal unless an earlier run of the daemon (or an
        earlier drain of the same event) already did."""
        proc = ProcessRecord(
            holder.identity, holder.name, holder.devices, first_seen=now, late_arrival=late, uid=holder.uid,
            sigterm=holder.sigterm, workload=holder.workload,
        )  # fmt: skip
        self.record.processes[holder.identity] = proc
        self._pending[holder.identity] = None
        sent_at = self._sent_at.get(holder.identity, {})
        for signum in sorted(self._already.get(holder.identity, ())):
            proc.signals.append(SentSignal(signum, sent_at.get(signum), SignalResult.SENT))
        ask = self._ladder.ask
        if ask.signum not in self._already.get(holder.identity, ()):
            return SendSignal(holder.identity, ask.signum, ask.at)
        return None

    def _waits(self, identity: ProcessIdentity, admit_new: bool) -> bool:
        """Held back: new to every run of the daemon (or only possibly signalled) while not admitted."""
        return not admit_new and (identity not in self._already or identity in self._unsure)

    def _note_held_back(self) -> None:
        """Said once per drain: newcomers wait for the event to be confirmed (after a restart)."""
        if self._held_back and not self._said_held_back:
            self._said_held_back = True
            self.record.notes.append(
                f"{len(self._held_back)} process(es) opened a device while the event awaited confirmation "
                "after a restart: not signalled until the metadata server confirms it"
            )

    def _deadline(self, still_holding: Collection[ProcessIdentity], now: float) -> list[SendSignal]:
        """At the deadline: the ladder's forcing step (SIGKILL) to what still holds a device, or, without
        one, only report ("leave")."""
        force = self._ladder.force
        if force is None:
            self._finish(Outcome.TIMED_OUT, now)
            return []
        self.phase = Phase.KILLING
        self._kill_deadline = now + self._kill_wait
        # A newcomer tracked in this very scan still holds the device (it was just seen holding it).
        targets = [i for i in self._pending if i in still_holding or not self.record.processes[i].signals]
        if self.record.dry_run:
            self._finish(Outcome.TIMED_OUT, now)  # nothing was signalled, nothing will exit: no kill wait
        return [SendSignal(i, force.signum, force.at) for i in targets]

    def _scan_while_killing(self, holders: Sequence[Holder], now: float, admit_new: bool) -> list[SendSignal]:
        """Past the deadline, SIGKILL sent: a newcomer (or a process that released a device and opened it
        again) gets its SIGTERM and SIGKILL in one wave, and the kill wait runs from that SIGKILL."""
        self._last_scan = now
        actions: list[SendSignal] = []
        for h in holders:
            proc = self.record.processes.get(h.identity)
            if proc is None and not self._waits(h.identity, admit_new):
                action = self._track(h, now, late=True)
                actions += [action] if action is not None else []
            elif proc is not None and proc.end is End.RELEASED:
                self._reopened(proc)
        force = self._ladder.force
        if force is None:  # never: KILLING is entered only through the forcing step (`_deadline`)
            return actions
        kills = [h.identity for h in holders if h.identity in self._pending]
        kills = [i for i in kills if not self.record.processes[i].killed]
        if kills:
            self._kill_deadline = max(self._kill_deadline or now, now + self._kill_wait)
        return actions + [SendSignal(i, force.signum, force.at) for i in kills]

    def _reopened(self, proc: ProcessRecord) -> None:
        """A process that released its device holds one again: waited for again."""
        proc.end, proc.ended_at = None, None
        self._pending[proc.identity] = None
        self.record.notes.append(f"{proc.identity} {proc.name} opened a device again after releasing it")

    def _end(self, proc: ProcessRecord, end: End, now: float, status: ExitStatus | None = None) -> None:
        proc.end, proc.ended_at, proc.exit_status = end, now, status
        self._pending.pop(proc.identity, None)

    def _settle(self, now: float) -> None:
        if self.done:
            return
        waiting = self.phase is Phase.WAITING
        if not self._pending and not ((self._held_back or self._awaiting_scan) and waiting):
            self._finish(Outcome.EXITED if self.phase is Phase.WAITING else Outcome.TIMED_OUT, now)
        elif self.phase is Phase.KILLING and self._kill_deadline is not None and now >= self._kill_deadline:
            self.record.notes.append(f"{len(self._pending)} process(es) still running after SIGKILL")
            self._finish(Outcome.TIMED_OUT, now)

    def _finish(self, outcome: Outcome, now: float) -> None:
        self.phase = Phase.DONE
        self.record.outcome = outcome
        self.record.ended = now
