"""`run_drain(...)`: walk a drain's signal ladder (SIGTERM the TPU holders, wait for them to exit or the
deadline, then SIGKILL the rest).

The loop at the edge around the pure `DrainCore`: it reads the injected clock, runs the scanner, sends
through the signaller, and waits on the exit waiter (poll(2) on pidfds, so an exit is noticed as it happens).

Between its own due times (a rescan, the deadline, the end of the kill wait) the drain sleeps in poll(2) on
the pidfds and on `wake`, which whoever changes what the drain reads (`cancel`: the event went away;
`stop`: the daemon is shutting down; the listener's deadline and admission) rings: the drain wakes at the
change, and never in between. A caller without a `wake` (a test's own exit waiter) gets each wait bounded
to `POLL_CAP` instead, so cancel and stop are still seen within 0.1 s.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from watchdog.core.clock import Clock, SystemClock
from watchdog.core.drain import DrainCore, DrainPlan, SendSignal
from watchdog.core.drain_record import DrainRecord, ExitStatus, SignalResult
from watchdog.core.ladder import At
from watchdog.core.process import Holder, ProcessIdentity
from watchdog.host.exits import PidfdExitWaiter, Wakeup
from watchdog.host.signals import DryRunSignaller, PidfdSignaller, ProcessHandles

__all__ = [
    "POLL_CAP",
    "DrainListener",
    "ExitWaiter",
    "Scanner",
    "Signaller",
    "run_drain",
]

POLL_CAP = 0.1  # without a `wake`: the longest wait between looks at cancel/stop (module docstring)
PUBLISH_INTERVAL = 0.1  # on_update at most this often while the drain runs (and once at the end)


class ScanLike(Protocol):
    @property
    def holders(self) -> Sequence[Holder]: ...


class Scanner(Protocol):
    def scan(self) -> ScanLike: ...


class Signaller(Protocol):
    dry_run: bool

    def prepare(self, identities: Iterable[ProcessIdentity]) -> None: ...

    def send(self, identity: ProcessIdentity, signum: int) -> SignalResult: ...


class ExitWaiter(Protocol):
    def watch(self, identity: ProcessIdentity) -> SignalResult | None: ...

    def unwatch(self, identity: ProcessIdentity) -> None: ...

    def watching(self) -> set[ProcessIdentity]: ...

    def wait(self, timeout: float) -> list[tuple[ProcessIdentity, ExitStatus]]: ...

    def running(self, identity: ProcessIdentity) -> bool: ...


class DrainListener:
    """What the drain tells, and asks, the code that runs it. Each method is a no-op here: override what
    you need. An exception from one is noted in the record, never raised: it must not stop a drain."""

    def before_signals(self, intents: Sequence[tuple[ProcessIdentity, int]], record: DrainRecord) -> None:
        """Called BEFORE a wave of signals goes out: persist them (write-ahead; one write for a wave).
        `record` is the live record (names, late arrivals): read it now, never keep it."""

    def after_signals(
        self, sent: Sequence[tuple[ProcessIdentity, int, SignalResult]], record: DrainRecord
    ) -> None:
        """Called after a wave, with what became of each signal (and the live record, as above)."""

    def updated(self, record: DrainRecord) -> None:
        """A copy of the record when it changed (at most every PUBLISH_INTERVAL, and at the end)."""

    def scanned(self, holders: Sequence[Holder]) -> None:
        """A rescan's holders (every second of the drain): who holds a device now, for the holder gauges."""

    def deadline(self) -> float | None:
        """The deadline now (monotonic), read on every turn: it may move earlier, never later."""
        return None

    def admits_newcomers(self) -> bool:
        """False holds back processes not signalled before (after a restart, until the event is confirmed)."""
        return True


def run_drain(
    holders: Sequence[Holder],
    plan: DrainPlan,
    *,
    scanner: Scanner,
    listener: DrainListener | None = None,
    cancel: threading.Event | None = None,
    stop: threading.Event | None = None,
    clock: Clock | None = None,
    signaller: Signaller | None = None,
    exits: ExitWaiter | None = None,
    proc_root: str = "/proc",
    wake: Wakeup | None = None,
) -> DrainRecord:
    """Drain `holders` (a fresh scan) as `plan` says and return the record. `cancel`: the event went away;
    `stop`: the daemon is stopping; `wake`: rung when either is set or the listener's answers change (it
    ends the drain's wait at once; without it each wait is bounded to POLL_CAP). Signaller and exit waiter
    default to pidfd ones sharing one `ProcessHandles`, closed at the end; the exit waiter polls `wake`."""
    if wake is not None and exits is not None:
        raise ValueError("wake needs the drain's own exit waiter (exits=None): yours polls its own fds")
    if signaller is not None and plan.dry_run and not signaller.dry_run:
        raise ValueError("dry_run=True needs a dry-run signaller: refusing to send real signals")
    clock = clock or SystemClock()
    listener = listener or DrainListener()
    cancel = cancel if cancel is not None else threading.Event()
    stop = stop if stop is not None else threading.Event()
    owned: ProcessHandles | None = None
    if signaller is None or exits is None:
        owned = ProcessHandles(proc_root)
        signaller = signaller or (DryRunSignaller(owned) if plan.dry_run else PidfdSignaller(owned))
        exits = exits or PidfdExitWaiter(owned, wake=wake)
    if signaller.dry_run and not plan.dry_run:
        plan = dataclasses.replace(plan, dry_run=True)  # a signaller that sends nothing: the record says so
    core = DrainCore(holders, plan, now=clock.monotonic(), now_wall=clock.wall())
    loop = _Loop(core, scanner, signaller, exits, clock, listener, cap=None if wake is not None else POLL_CAP)
    try:
        loop.run(core.start(loop.admits_newcomers()), cancel, stop)
    finally:
        for identity in exits.watching():
            exits.unwatch(identity)
        if owned is not None:
            owned.close()
    return core.record


class _Loop:
    """One drain's loop: carry out actions, keep the pending processes watched, wait, rescan."""

    def __init__(
        self,
        core: DrainCore,
        scanner: Scanner,
        signaller: Signaller,
        exits: ExitWaiter,
        clock: Clock,
        listener: DrainListener,
        cap: float | None,
    ) -> None:
        """`cap`: the longest wait (None: until the next due time; `wake` ends it sooner)."""
        self.core, self.scanner, self.signaller, self.exits = core, scanner, signaller, exits
        self.clock, self.listener, self.cap = clock, listener, cap
        self.dirty, self.published = True, float("-inf")

    def admits_newcomers(self) -> bool:
        try:
            return self.listener.admits_newcomers()
        except Exception as e:  # noqa: BLE001 - a failing gate holds newcomers back; it must not end the drain
            self.note(f"admits_newcomers failed: {type(e).__name__}: {e}")
            return False

    def run(self, actions: list[SendSignal], cancel: threading.Event, stop: threading.Event) -> None:
        core = self.core
        self.act(actions, cancel, stop)
        while not core.done:
            deadline = self.ask(self.listener.deadline)
            if deadline is not None and core.move_deadline(deadline, self.clock.monotonic()):
                self.dirty = True
            if stop.is_set():
                for identity, status in self.exits.wait(0.0):  # ended before the stop: told, not lost
                    core.observe_exit(identity, status, self.clock.monotonic())
                core.interrupt(self.clock.monotonic())
                self.dirty = True  # its last record is published: what ended is kept for the next run
            elif cancel.is_set():
                core.cancel(self.clock.monotonic())
            elif core.wants_scan(self.clock.monotonic()):
                self.act(self.rescan(), cancel, stop)
            else:
                exited = self.sleep(cancel, stop)
                for identity, status in exited:
                    core.observe_exit(identity, status, self.clock.monotonic())
                core.observe_time(self.clock.monotonic())
                self.dirty = self.dirty or bool(exited) or core.done
            self.publish()
        self.publish(final=True)

    def sleep(
        self, cancel: threading.Event, stop: threading.Event
    ) -> list[tuple[ProcessIdentity, ExitStatus]]:
        """Wait on the clock for an exit, a change of what the drain reads (cancel, stop, the deadline,
        admission: `wake` ends a real wait for it), or the next due time (`wait_for`)."""
        exited: list[tuple[ProcessIdentity, ExitStatus]] = []
        reads = self.reads()

        def look(seconds: float) -> bool:
            exited.extend(self.exits.wait(seconds))
            return bool(exited) or stop.is_set() or cancel.is_set() or self.reads() != reads

        self.clock.wait(self.wait_for(), look)
        return exited

    def reads(self) -> tuple[float | None, bool]:
        """What the drain reads from its listener, as a look at whether it changed (a failing read is
        noted on the drain's next turn, by `ask`)."""
        try:
            return self.listener.deadline(), self.listener.admits_newcomers()
        except Exception:  # noqa: BLE001 - the turn's own read notes it; a look must not
            return None, False

    def wait_for(self) -> float:
        """How long to sleep: until the drain's next due time or, with changes not yet published, the next
        publication (at most `cap`). A change from outside rings `wake` and ends the sleep sooner."""
        now = self.clock.monotonic()
        timeout = self.core.timeout(now)
        if self.dirty:
            timeout = min(timeout, max(0.0, self.published + PUBLISH_INTERVAL - now))
        return timeout if self.cap is None else min(timeout, self.cap)

    def rescan(self) -> list[SendSignal]:
        """Scan; a pending process missing from the scan but running has released the device."""
        try:
            holders: Sequence[Holder] | None = tuple(self.scanner.scan().holders)
        except Exception as e:  # noqa: BLE001 - a failed scan must not end the drain; it is noted instead
            holders = None
            self.note(f"scan failed: {type(e).__name__}: {e}")
        if holders is not None:
            self.hook(self.listener.scanned, holders)
        seen = {h.identity for h in holders or ()}
        running = {i for i in self.core.pending() if i not in seen and self.exits.running(i)}
        admit = self.admits_newcomers()
        return self.core.observe_scan(holders, running, self.clock.monotonic(), admit_new=admit)

    def act(self, actions: list[SendSignal], cancel: threading.Event, stop: threading.Event) -> None:
        """Send each signal (intent first, result after), then watch every pending process for its exit."""
        if cancel.is_set():
            actions = []  # the event went away: nobody new is signalled, and nothing is killed
        self.signaller.prepare(a.identity for a in actions)
        if actions:
            self.hook(
                self.listener.before_signals, [(a.identity, a.signum) for a in actions], self.core.record
            )
        done: list[tuple[ProcessIdentity, int, SignalResult]] = []
        for action in actions:
            if cancel.is_set() or (action.at is At.DEADLINE and stop.is_set()):
                break  # the loop ends the drain as cancelled/interrupted; no SIGKILL after either
            result = self.signaller.send(action.identity, action.signum)
            done.append((action.identity, action.signum, result))
            self.core.observe_signal(action.identity, action.signum, result, self.clock.monotonic())
        if done:
            self.hook(self.listener.after_signals, done, self.core.record)
        pending = set(self.core.pending())
        for identity in self.exits.watching() - pending:
            self.exits.unwatch(identity)  # released (or ended otherwise): no longer waited for
        for identity in pending - self.exits.watching():
            if self.exits.watch(identity) is not None:
                self.core.observe_exit(identity, ExitStatus(), self.clock.monotonic())
        self.dirty = True

    def publish(self, final: bool = False) -> None:
        """Hand `on_update` a copy of the record: when it changed, at most every PUBLISH_INTERVAL (a copy of
        hundreds of records per exit would slow the drain), and always at the end."""
        now = self.clock.monotonic()
        if not self.dirty:
            return
        if not final and now < self.published + PUBLISH_INTERVAL:
            return
        self.dirty, self.published = False, now
        self.hook(self.listener.updated, copy.deepcopy(self.core.record))

    def hook(self, fn: Callable[..., None], *args: object) -> None:
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - a failing hook (state file, status) must not stop a drain
            self.note(f"{getattr(fn, '__name__', 'hook')} failed: {type(e).__name__}: {e}")

    def ask(self, fn: Callable[[], float | None]) -> float | None:
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - as for hooks: noted, and the drain goes on
            self.note(f"{getattr(fn, '__name__', 'listener')} failed: {type(e).__name__}: {e}")
            return None

    def note(self, text: str) -> None:
        if len(self.core.record.notes) < 100:  # bounded: a hook failing on every signal must not flood it
            self.core.record.notes.append(text)
            self.dirty = True
