"""The daemon: the metadata watches feed one event loop; the loop owns the lifecycle and runs its drains.

Signal first, then tell: each step queues the state file's write (`daemon/writeahead.py`: a drain's first
signal follows it in that one queue, and the loop never waits for the disk), acts (starts a drain, moves
a deadline, cancels), and only then tells (`_tell`: after a wave held for its write-ahead is out): it
emits the moment (`core/moments.py`) to the outputs that subscribe (`daemon/telling.py`: log lines,
webhooks, hooks, the history, the gauges, /status, sd_notify), each guarded by `Outputs`, so no output can
delay or stop a signal.

One loop runs the daemon, a drain included (`daemon/runner.py`): it sleeps in one poll(2) on the inbox's
eventfd and a running drain's pidfds, until a message (a metadata answer, a scan, the state writer's word,
SIGHUP), a process's exit, or its next time-based decision (`_due_times`: a drain's next step, a notice's
before-window SIGTERM, a watchdog ping...); one kept on the wall clock is looked at again every
LOOP_CEILING. What blocks runs in threads that report into the inbox: one per watched key (hanging GETs),
the scanning thread (`daemon/index.py`), the HTTP listener, the state writer and its syncer, hook and
webhook runners. Only the loop changes the lifecycle. One `stop` event ends everything: the loop saves the
state and returns within about a second, a drain in progress ends "interrupted" and is resumed, with the
same deadline, by the next start.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from watchdog.config.settings import Config
from watchdog.core.clock import Clock
from watchdog.core.drain_record import DrainRecord, ExitStatus
from watchdog.core.lifecycle import (
    Action,
    CancelDrain,
    Lifecycle,
    MoveDeadline,
    StartDrain,
    joined_outcome,
)
from watchdog.core.moments import (
    RESUMED,
    RETRY,
    DaemonStarted,
    DrainEnded,
    DrainProgress,
    DrainStarted,
    Moment,
    moment_of,
)
from watchdog.core.process import Holder, ProcessIdentity
from watchdog.core.stop import Stop
from watchdog.core.vocabulary import UPCOMING_MAINTENANCE, Outcome, Output, source_of
from watchdog.daemon.announce import PROGRESS_INTERVAL
from watchdog.daemon.departures import Departures
from watchdog.daemon.device_watch import DeviceWatch
from watchdog.daemon.identity_learner import Fetch, learn_identity
from watchdog.daemon.inbox import Inbox
from watchdog.daemon.index import HolderIndex, HoldersScanned
from watchdog.daemon.newcomers import Newcomers, late_arrivals
from watchdog.daemon.notice_timing import NoticeTiming
from watchdog.daemon.notices import Notices
from watchdog.daemon.outputs import Outputs
from watchdog.daemon.recorder import HistoryEntries
from watchdog.daemon.reload import Reloader
from watchdog.daemon.reporting import Reporter
from watchdog.daemon.runner import (
    RESCAN_INTERVAL,
    AttemptEnded,
    DrainOrder,
    DrainReport,
    DrainRunner,
    HoldersNow,
    RecordChanged,
)
from watchdog.daemon.sighup import ReloadAsked
from watchdog.daemon.systemd import SystemdNotify
from watchdog.daemon.telling import Telling
from watchdog.daemon.view import StatusView
from watchdog.exitcodes import EXIT_OK
from watchdog.metadata.watch import (
    KeyUnsupported,
    MetadataWatcher,
    ValueChanged,
    WatchEvent,
    WatchFailed,
)
from watchdog.store.statefile import StateStore
from watchdog.surface.hooks import HookRunner

log = logging.getLogger("tpu-watchdog")

LOOP_CEILING = 10.0  # s between looks at a due time kept on the wall clock (a wall-clock step is caught up)
STOP_DISK_WAIT = 1.0  # s a stop waits for the disk: the state file's and the history's last writes


@dataclass(frozen=True)
class PersistenceChanged:
    """The state writer wrote (or failed to): whether the state file is persisted, for the loop to show."""


# What the inbox carries: the watches' answers, the scans, SIGHUP, the state writer's word.
Message: TypeAlias = WatchEvent | HoldersScanned | ReloadAsked | PersistenceChanged


@dataclass(eq=False)
class Daemon:
    """The loop and what it works with, each built once and wired by compose.py (the composition root):
    the inputs that feed the inbox, the core's lifecycle and the verdicts on it, the drain's runner, and
    the outputs it tells."""

    config: Config  # replaced by a reload (daemon/reload.py)
    stop: Stop  # set: the loop saves the state and returns
    clock: Clock  # the daemon's one clock: every due time, deadline and wait reads it
    inbox: Inbox[Message]  # what the other threads report, in order; rung by the stop
    watcher: MetadataWatcher  # the hanging GETs, one thread per key, answering into the inbox
    index: HolderIndex  # the warm holder index, scanning into the inbox
    devices: DeviceWatch  # whether any device file matches, checked every DEVICE_CHECK
    lifecycle: Lifecycle  # the core: events and the drain, restored from the state file
    notice_timing: NoticeTiming  # the policy's verdicts on the watched values; holds the policy
    newcomers: Newcomers  # who may be signalled that nobody signalled before
    runner: DrainRunner  # runs each drain, on this loop, and says what it has to say
    store: StateStore  # the state file (its writes queue on `runner.writer`)
    telling: Telling  # every moment, to every output that subscribes
    reporter: Reporter  # what the inputs say: metrics, /status fields, lines
    view: StatusView  # /status, `status` and STATUS=
    recorder: HistoryEntries  # the history: its entries and due writes
    systemd: SystemdNotify  # READY=1, WATCHDOG=1, STATUS=
    departures: Departures  # holders that left with no event on
    notices: Notices  # the webhook notices (a reload swaps their sender)
    hooks: HookRunner  # the site's hooks (a reload changes their commands)
    reloader: Reloader  # SIGHUP
    outputs: Outputs  # every output's guard
    identity: Fetch | None = None  # reads the instance's identity; None: not asked
    progress_interval: float = PROGRESS_INTERVAL  # s between a drain's progress lines
    wedge_file: str | None = None  # test-only fault switch: see _wedge_if_asked
    # The loop's own: what it learnt, and when it next looks.
    indexed: HoldersScanned = field(init=False, default_factory=HoldersScanned)  # a first wave starts here
    last_record: DrainRecord | None = field(init=False, default=None)  # a reopened drain goes on from it
    _next_scan: float = field(init=False, default=0.0)  # the late-arrival watch's next scan
    _late_scan: int | None = field(init=False, default=None)  # the ticket of its scan under way
    _untold: list[Moment | RecordChanged | HoldersNow] = field(init=False, default_factory=list)  # `_tell`
    _next_progress: float = field(init=False, default=0.0)  # a running drain's next progress line

    def __post_init__(self) -> None:
        self._refresh_admission()  # set again whenever the lifecycle changes, and on each tick

    # -- the loop ------------------------------------------------------------------------------------

    def run(self) -> int:
        # Wake the loop the moment `stop` is set, in the setter's thread: the loop sleeps until its next
        # due time, and the inbox (answers, scans, the writer's word, SIGHUP) wakes it at once.
        self.stop.on_set(self._wake_on_stop)
        self._resume()
        self.watcher.start()
        self.index.start()
        if self.identity is not None:
            threading.Thread(
                target=learn_identity, args=(self.identity, self.reporter.identity_learned, self.stop),
                kwargs={"outputs": self.outputs}, name="host-identity", daemon=True,
            ).start()  # fmt: skip
        self._tell(DaemonStarted(self.lifecycle.state.value, tuple(self.devices.patterns)))
        self._guarded(self.devices.check, self.clock.monotonic())  # at start: what is watched, or nothing
        while not self.stop.is_set():
            self.view.loop_ticked()
            message, exited = self._receive(self._sleep())
            if exited:
                self._guarded(self._drain_said, self.runner.exited(exited))
            if message is not None:
                self._guarded(self._handle, message)
            self._timers(self.clock.monotonic())
            self._refresh_admission()
            self._guarded(self._drain_said, self.runner.step())
            self._wedge_if_asked()
        self._shutdown()
        return EXIT_OK

    def _receive(self, timeout: float) -> tuple[Message | None, list[tuple[ProcessIdentity, ExitStatus]]]:
        """The next message of the inbox (None: none came in time) and the exits of a running drain's
        processes, waited for together on the daemon's clock (`DrainRunner.wait`: one poll(2))."""
        exited: list[tuple[ProcessIdentity, ExitStatus]] = []

        def look(seconds: float) -> bool:
            if self.inbox.ready() or self.stop.is_set():
                return True
            exited.extend(self.runner.wait(seconds, self.inbox))
            return bool(exited) or self.inbox.ready() or self.stop.is_set()

        self.clock.wait(timeout, look)
        try:
            return self.inbox.get_nowait(), exited
        except queue.Empty:
            return None, exited

    def _sleep(self) -> float:
        """How long the loop may wait for a message: until the earliest of `_due_times`. A due time on the
        wall clock (a notice's before-window SIGTERM) is looked at again every LOOP_CEILING at most, so a
        step of the wall clock is caught up; an idle daemon, with none, wakes for its messages and its
        monotonic due times alone (the device check every DEVICE_CHECK)."""
        now = self.clock.monotonic()
        try:
            monotonic, wall = self._due_times(now)
        except Exception:  # a bug in a due time: the ceiling then, and the loop goes on
            with self.outputs.guarded(Output.LOG):
                log.exception("internal error in the loop's due times: the daemon carries on")
            return LOOP_CEILING
        dues = [due - now for due in monotonic if due is not None]
        dues += [min(due - now, LOOP_CEILING) for due in wall if due is not None]
        return max(0.0, min(dues, default=LOOP_CEILING))

    def _due_times(self, now: float) -> tuple[list[float | None], list[float | None]]:
        """When each time-based decision of the loop (`run`, `_timers`) is next due, as monotonic times
        (None: none pending): those kept on the monotonic clock, then those kept on the wall clock. A
        decision missing here would wait for the next message or due time."""
        offset = now - self.clock.wall()  # the wall times below, as monotonic ones
        wall = [self.notice_timing.next_due(now - offset), self.newcomers.next_due(now - offset)]
        life, running = self.lifecycle, self.runner.running
        monotonic = [
            self.runner.next_due(now),
            *self.systemd.next_due(),
            self.recorder.next_due(),
            self._next_progress if running and life.drain is not None else None,
            self._next_scan if not running and life.drain is None and life.events else None,
            self.departures.next_due(now),
            self.devices.next_due,
        ]
        return monotonic, [None if due is None else due + offset for due in wall]

    def _guarded(self, step: Callable[..., None], *args: object) -> None:
        """One step of the loop; a bug or an unexpected error in it is logged, and the loop goes on."""
        try:
            step(*args)
        except Exception:  # nothing may take the watchdog down; the error is logged whole
            with self.outputs.guarded(Output.LOG):  # and a log that fails is no exception to that
                log.exception("internal error in %s: the daemon carries on", getattr(step, "__name__", step))

    def _handle(self, message: Message) -> None:
        if isinstance(message, HoldersScanned):
            self._scanned(message)
            return
        if isinstance(message, PersistenceChanged):
            self._drain_said(self.runner.written())  # a wave held for its write-ahead goes first
            self.reporter.persistence()
            self.recorder.seen(self.lifecycle)  # a drain's opening entry follows its state onto the disk
            return
        if isinstance(message, ReloadAsked):
            self.reloader.reload(self)
            return
        self.systemd.heard(message.key)
        if isinstance(message, ValueChanged):
            self._value_changed(message)
        elif isinstance(message, WatchFailed):
            self.reporter.metadata_failed(message)
        elif isinstance(message, KeyUnsupported):
            source = source_of(message.key)
            if self.reporter.metadata_unsupported(message.key):
                # It answered in this run: a passing 404 (a server hiccup) is no reason to drop an event.
                return  # (the watch's own line says the 404)
            with self.outputs.guarded(Output.LOG):  # the event below must clear whatever this line does
                log.debug("metadata %s: unsupported (the watch said so)", message.key)
            # A key this machine lacks asks for nothing: an event of it (restored from the state file)
            # would otherwise never clear.
            self._apply(self.lifecycle.observe(source, None, self.clock.wall()))

    def _scanned(self, scan: HoldersScanned) -> None:
        """A full scan: the drain's, when it asked for it (it says who holds a device now, `HoldersNow`),
        the late-arrival watch's, or an idle refresh of the index. Each is the index a drain starts from."""
        drains = self.runner.running
        self._drain_said(self.runner.scanned(scan))
        late = self._late_scan is not None and scan.ticket >= self._late_scan
        if late:
            self._late_scan = None
        if scan.error:
            return
        self.indexed = scan  # `_timers` watches its holders for departures next (`_departures`)
        if drains:
            return
        self.reporter.holders_scanned(scan.holders)
        if late and self.lifecycle.drain is None and self.lifecycle.events:
            self._late_arrivals(scan.holders)

    def _value_changed(self, message: ValueChanged) -> None:
        self.reporter.metadata_value(message.key, message.value)  # guarded: it cannot stop the verdict
        source = source_of(message.key)
        restored = self.lifecycle.events.get(source)
        unconfirmed = restored is not None and not restored.confirmed
        now = self.clock.wall()
        self._apply(
            self.lifecycle.observe(source, self.notice_timing.verdict(source, message.value, now), now)
        )
        if unconfirmed and restored is not None and restored.confirmed:
            self._next_scan = 0.0  # newcomers held back until this answer are owed their SIGTERM now
        if source == UPCOMING_MAINTENANCE.source:  # the window a notice waits for moved
            self._apply(self.notice_timing.due(now))

    def _timers(self, now: float) -> None:
        """Each time-based step, guarded on its own: each moves its due time (`_due_times`) before it
        acts, so one that fails is not taken again at once (the loop would spin) and skips no other."""
        steps = (self.systemd.tick, self._heard, self.recorder.tick, self._notices_due, self._progress,
                 self._watch_late_arrivals, self._departures, self.devices.check)  # fmt: skip
        for step in steps:
            self._guarded(step, now)

    def _heard(self, now: float) -> None:
        """Every good answer counts, an unchanged hanging-GET timeout too: the watches keep the time."""
        self.reporter.metadata_heard(self.watcher.statuses())

    def _notices_due(self, now: float) -> None:
        self._apply(self.notice_timing.due(self.clock.wall()))  # maintenance put off, drain_before_window

    def _progress(self, now: float) -> None:
        drain = self.lifecycle.drain
        if self.runner.running and drain is not None and now >= self._next_progress:
            self._next_progress = now + self.progress_interval
            self._tell(DrainProgress(self.view.record, drain.deadline, drain.drain_id, self.clock.wall()))

    def _departures(self, now: float) -> None:
        self.departures.tick(self.runner.running or bool(self.lifecycle.events), self.view.holders)

    def _watch_late_arrivals(self, now: float) -> None:
        """While drained events are on, scan as a drain does (the scanning thread's scan, `_scanned`): a
        newcomer (a restarted job) gets a drain."""
        if self.runner.running or self.lifecycle.drain is not None or not self.lifecycle.events:
            return
        if now < self._next_scan or self._late_scan is not None:
            return
        self._next_scan = now + RESCAN_INTERVAL
        self._late_scan = self.index.scan_now()

    def _late_arrivals(self, holders: Sequence[Holder]) -> None:
        """The late-arrival watch's scan: who holds a device that this event has not signalled."""
        self._refresh_admission()
        unsure, ask = self.newcomers.possibly_signalled, self.notice_timing.policy.ladder.ask.name
        if self.runner.admit and late_arrivals(holders, self.store, self.outputs, unsure, ask):
            self._apply(self.lifecycle.late_arrivals(self.clock.wall()))

    def _refresh_admission(self) -> None:
        """Tell the running drain whether it may signal processes nobody signalled before (`Admission`)."""
        self.runner.admit = self.newcomers.admitted(self.clock.wall())

    # -- actions of the lifecycle --------------------------------------------------------------------

    def _apply(self, actions: list[Action], told_first: Sequence[Moment] = ()) -> None:
        """Act, persist, tell: the state file's write is queued and every drain started before
        the first log line, notice, hook or metric of the step, none of which can raise here (`Outputs`).
        A drain starts after its own state's write is queued (`StateWriter`: one queue, so the file knows
        the drain before any of its signals); a step never both starts a drain and moves or cancels one.
        `told_first`: what the step itself was (a drain ended), told before the actions it led to."""
        if not actions and not told_first:
            return
        orders: list[DrainOrder] = []
        for action in actions:
            if isinstance(action, StartDrain):
                orders.append(self._drain_order(action.event.source, action.deadline, resume=action.late))
            elif isinstance(action, MoveDeadline):
                self.runner.move_deadline(self._to_mono(action.deadline))
            elif isinstance(action, CancelDrain):
                self.runner.cancel_drain()
        self._changed(orders)
        said = [report for order in orders for report in self.runner.start(order)]
        now = self.clock.wall()
        for moment in (*told_first, *(moment_of(action, now) for action in actions)):
            self._tell(moment)
        self._drain_said(said)

    def _changed(self, orders: Sequence[DrainOrder] = ()) -> None:
        """Persist, then show: the state file's write is queued first, with the intents of each new drain's
        first wave (`orders`: one write before the wave, `StateStore.save_lifecycle`). The write and its
        fsyncs run in the writer's thread: a hung disk never stops the loop hearing the next event."""
        self._refresh_admission()
        life = self.lifecycle
        intents = [i for order in orders for i in order.first_intents()] if self.runner.admit else []
        self.runner.writer.save(self.store.lifecycle_change(
            life.events.values(), life.drain, life.last_outcome, on_timeout=self.config.on_timeout,
            intents=intents, last_dry_run=life.rehearsed, ended=life.ended, ended_at=life.ended_at,
        ), intents)  # fmt: skip
        self.reloader.settle(self)  # a reloaded policy waits for the event in progress to end

    def _resume(self) -> None:
        """An unfinished drain goes on, with its deadline and signals; an undrained event gets its drain."""
        active = self.lifecycle.drain
        if active is None:
            waiting = self.lifecycle.start_waiting(self.clock.wall())
            if waiting:
                self._apply(waiting)
                return
        order = None if active is None else self._drain_order(RESUMED, active.deadline, resume=True)
        self._changed(() if order is None else (order,))
        if active is not None and order is not None:
            said = self.runner.start(order)
            self._tell(DrainStarted(RESUMED, active.deadline, self.clock.wall()))
            self._drain_said(said)

    def _drain_order(self, cause: str, deadline: float, resume: bool) -> DrainOrder:
        """The lifecycle's current drain, to run (`DrainRunner.order`). Tells nothing: the `DrainStarted`
        moment does, after."""
        self._refresh_admission()
        self._next_progress = self.clock.monotonic() + self.progress_interval
        return self.runner.order(
            cause, self.lifecycle.drain, deadline, resume=resume, ladder=self.notice_timing.policy.ladder,
            possibly_signalled=self.newcomers.possibly_signalled, indexed=self.indexed,
            last_record=self.last_record,
        )  # fmt: skip

    def _drain_said(self, reports: Sequence[DrainReport]) -> None:
        """What the drain had to say, in the order it happened, shown and told (`_tell`) with the loop's
        own moments in one order; the end of an attempt is taken once everything before it is told."""
        for report in reports:
            if isinstance(report, AttemptEnded):
                self._tell_untold(force=True)
                self._guarded(self._drain_done, report.record)
            else:
                self._tell(report)

    def _tell(self, told: Moment | RecordChanged | HoldersNow) -> None:
        """Signal first, then tell: what the loop and the drain have to say waits while a wave of signals
        is held for its write-ahead (at most WRITE_AHEAD_WAIT), so the wave goes before the lines, notices
        and hooks of the step that led to it; then it is told in the order it happened."""
        self._untold.append(told)
        self._tell_untold()

    def _tell_untold(self, force: bool = False) -> None:
        if self.runner.holding and not force:
            return
        while self._untold:
            self._guarded(self._show_or_tell, self._untold.pop(0))

    def _show_or_tell(self, told: Moment | RecordChanged | HoldersNow) -> None:
        if isinstance(told, RecordChanged):
            self.view.drain_update(told.record)
        elif isinstance(told, HoldersNow):
            self.reporter.holders_now(told.holders)
        else:
            self.telling.tell(told)

    def _drain_done(self, record: DrainRecord | None) -> None:
        self.newcomers.taken_on(record.processes if record is not None else ())
        self._next_scan = 0.0  # the late-arrival watch (events still on) or the index: refresh now
        self.index.refresh_soon()
        if record is None:
            if self.lifecycle.drain is not None and not self.stop.is_set():
                # Nothing changed since the failed attempt: its state is queued or on disk already, and the
                # retry writes its first wave's intents ahead itself, as every later wave's.
                self._drain_said(
                    self.runner.start(self._drain_order(RETRY, self.lifecycle.drain.deadline, resume=True))
                )
            return
        self.last_record = record
        outcome = record.outcome or Outcome.INTERRUPTED
        if outcome is Outcome.INTERRUPTED:
            return  # the daemon is stopping: the state file keeps the drain for the next start
        drain, event = self.lifecycle.drain, self.lifecycle.drain_event()
        if drain is not None and drain.late:  # reopened: the first end's outcome, unless this one tells more
            outcome = Outcome(joined_outcome(self.lifecycle.last_outcome, outcome.value))
            record.outcome = outcome
            self.last_record = record
        waiting = self.lifecycle.drain_finished(outcome.value, self.clock.wall(), rehearsed=record.dry_run)
        entry = self.recorder.entry_of(record, drain, self.lifecycle)  # what every subscriber renders
        ended = DrainEnded(record, event, drain, self.lifecycle.state.value, self._deadline(), entry)
        self._apply(waiting, told_first=(ended,))  # waiting: an event that came while it was being cancelled

    def _deadline(self) -> float | None:
        return self.lifecycle.drain.deadline if self.lifecycle.drain else None

    def _to_mono(self, wall_deadline: float) -> float:
        return self.clock.monotonic() + (wall_deadline - self.clock.wall())

    def http_attempted(self, address: str, error: str | None) -> None:
        """The HTTP listener tried to bind (any thread): said once per change, in STATUS= too."""
        if self.reporter.listener(address, error):
            self.systemd.status()

    def _wake_on_stop(self) -> None:
        self.inbox.ring()  # the loop ends its wait at once; a drain in progress ends "interrupted"

    def _wedge_if_asked(self) -> None:
        """Test-only: once `wedge_file` exists, the loop stops ticking (no WATCHDOG=1 pings) until stopped,
        so a test can show systemd's watchdog restarting a wedged daemon. Never set in production."""
        if self.wedge_file and os.path.exists(self.wedge_file):
            log.error("test fault: %s exists, wedging the main loop", self.wedge_file)
            self.stop.wait()

    def _shutdown(self) -> None:
        self.systemd.stopping(drain_resumes=self.lifecycle.drain is not None)
        self._drain_said(self.runner.stopping())  # its last signals and its interrupted record, told
        self._tell_untold(force=True)
        # The last state and the drain's last history entry, on disk before the process ends: one second
        # for both, so a stuck disk holds the stop back once, not once per file.
        disk_deadline = self.clock.monotonic() + STOP_DISK_WAIT
        if not self.runner.writer.flush(STOP_DISK_WAIT):
            with self.outputs.guarded(Output.LOG):
                log.error("stopping with the state file's last writes not done: the disk is stuck")
        if not self.recorder.history.settled(max(0.0, disk_deadline - self.clock.monotonic())):
            with self.outputs.guarded(Output.LOG):
                log.error("stopping with the history's last writes not done: the disk is stuck")
        self.watcher.join(timeout=1.0)
        with self.outputs.guarded(Output.HOOKS):
            self.hooks.close(0.5)
        with self.outputs.guarded(Output.WEBHOOKS):
            self.notices.close(1.0)
        with self.outputs.guarded(Output.LOG):
            log.info("tpu-watchdog stopped (state %s)", self.lifecycle.state.value)
