"""A drain's run at the edge: walk its signal ladder (SIGTERM the TPU holders, wait for them to exit or the
deadline, then SIGKILL the rest) around the pure `DrainCore`.

`Draining` never blocks: it is fed what happened (a scan, exits, the time) and carries out what the core
decides (signals through the signaller, pending processes watched by pidfd). The daemon's loop drives it
(`daemon/runner.py`): its pidfds are on the loop's poll, its scans come from the scanning thread. A wave of
signals is written ahead first; when the write is still under way (`DrainListener.before_signals` says
False) the wave is held until the loop says it is done (`release`) or WRITE_AHEAD_WAIT passes.

`run_drain` drives one drain alone, to its end, in the calling thread (the drill, the benchmarks): it scans
inline and sleeps in poll(2) on the pidfds and on `wake`, which whoever changes what the drain reads
(`cancel`, `stop`, the listener's deadline and admission) rings. A caller without a `wake` (a test's own
exit waiter) gets each wait bounded to `POLL_CAP` instead, so cancel and stop are still seen within 0.1 s.
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
    "WRITE_AHEAD_WAIT",
    "DrainListener",
    "Draining",
    "ExitWaiter",
    "Scanner",
    "Signaller",
    "run_drain",
]

POLL_CAP = 0.1  # without a `wake`: the longest wait between looks at cancel/stop (module docstring)
PUBLISH_INTERVAL = 0.1  # on_update at most this often while the drain runs (and once at the end)
LONGEST_WAIT = 60.0  # s: the longest sleep of a drain run alone (a bound; something is always due sooner)
WRITE_AHEAD_WAIT = 0.5  # s a wave is held for its write-ahead before it goes out anyway (a stuck disk)


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

    def before_signals(self, intents: Sequence[tuple[ProcessIdentity, int]], record: DrainRecord) -> bool:
        """Called BEFORE a wave of signals goes out: persist them (write-ahead; one write for a wave).
        True: they are on file, the wave goes now; False: the write is under way, the wave is held
        until `Draining.release` (or WRITE_AHEAD_WAIT). `record` is the live record (names, late
        arrivals): read it now, never keep it."""
        return True

    def after_signals(
        self, sent: Sequence[tuple[ProcessIdentity, int, SignalResult]], record: DrainRecord
    ) -> None:
        """Called after a wave, with what became of each signal (and the live record, as above)."""

    def updated(self, record: DrainRecord) -> None:
        """A copy of the record when it changed (at most every PUBLISH_INTERVAL, and at the end)."""

    def held_too_long(self) -> None:
        """A held wave goes out without its write-ahead done (WRITE_AHEAD_WAIT passed): say so."""

    def holders_seen(self, holders: Sequence[Holder]) -> None:
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
    draining = Draining(core, signaller, exits, clock, listener, cancel, stop)
    try:
        draining.start()
        _run_alone(draining, scanner, cap=None if wake is not None else POLL_CAP)
    finally:
        draining.close()
        if owned is not None:
            owned.close()
    return core.record


def _run_alone(draining: Draining, scanner: Scanner, cap: float | None) -> None:
    """Drive `draining` to its end in this thread: scan when it asks, sleep on its pidfds between."""
    while True:
        draining.turn()
        if draining.done:
            break
        if draining.wants_scan():
            draining.scanned(*_scan(scanner))
        else:
            draining.exited(_sleep(draining, cap))
        draining.publish()
    draining.publish(final=True)


def _sleep(draining: Draining, cap: float | None) -> list[tuple[ProcessIdentity, ExitStatus]]:
    """Wait on the drain's clock for an exit, a change of what the drain reads (cancel, stop, the
    deadline, admission: `wake` ends a real wait for it), or its next due time; the exits seen."""
    exited: list[tuple[ProcessIdentity, ExitStatus]] = []
    reads = draining.reads()

    def look(seconds: float) -> bool:
        exited.extend(draining.exits.wait(seconds))
        return bool(exited) or draining.interrupted() or draining.reads() != reads

    timeout = min(draining.timeout(), LONGEST_WAIT)
    draining.clock.wait(timeout if cap is None else min(timeout, cap), look)
    return exited


def _scan(scanner: Scanner) -> tuple[Sequence[Holder] | None, str]:
    """A full scan: its holders, or None and why it failed."""
    try:
        return tuple(scanner.scan().holders), ""
    except Exception as e:  # noqa: BLE001 - a failed scan must not end the drain; it is noted instead
        return None, f"{type(e).__name__}: {e}"


class Draining:
    """One drain's run: carry out the core's actions, keep the pending processes watched, take what
    happened. Never blocks (a held wave waits for `release` or its time); the caller scans and waits."""

    def __init__(
        self,
        core: DrainCore,
        signaller: Signaller,
        exits: ExitWaiter,
        clock: Clock,
        listener: DrainListener,
        cancel: threading.Event,
        stop: threading.Event,
    ) -> None:
        self.core, self.signaller, self.exits = core, signaller, exits
        self.clock, self.listener, self.cancel, self.stop = clock, listener, cancel, stop
        self.dirty, self.published = True, float("-inf")
        self.scanning = False  # a scan asked for (`wants_scan`) and not yet `scanned`
        self.held: list[SendSignal] = []  # a wave waiting for its write-ahead (`release`)
        self.held_until = float("inf")

    @property
    def done(self) -> bool:
        """The core is done and its last wave is out (a deadline's SIGKILLs may end a drain at once)."""
        return self.core.done and not self.held

    @property
    def record(self) -> DrainRecord:
        return self.core.record

    def start(self) -> None:
        self.act(self.core.start(self.admits_newcomers()))

    def admits_newcomers(self) -> bool:
        try:
            return self.listener.admits_newcomers()
        except Exception as e:  # noqa: BLE001 - a failing gate holds newcomers back; it must not end the drain
            self.note(f"admits_newcomers failed: {type(e).__name__}: {e}")
            return False

    def interrupted(self) -> bool:
        return self.stop.is_set() or self.cancel.is_set()

    def turn(self) -> None:
        """What changed outside (the deadline, a cancel, a stop) and what is due by the time: taken now."""
        core, now = self.core, self.clock.monotonic()
        deadline = self.ask(self.listener.deadline)
        if deadline is not None and core.move_deadline(deadline, now):
            self.dirty = True
        if self.stop.is_set():
            self.exited(self.exits.wait(0.0))  # ended before the stop: told, not lost
            core.interrupt(self.clock.monotonic())
            self.held = []
            self.dirty = True  # its last record is published: what ended is kept for the next run
        elif self.cancel.is_set():
            self.held = []
            core.cancel(now)
            self.dirty = True
        elif self.held:  # the time decides nothing while a wave is on its way out
            if now >= self.held_until:
                self.hook(self.listener.held_too_long)
                self.release()
        else:
            core.observe_time(now)
            self.dirty = self.dirty or core.done

    def reads(self) -> tuple[float | None, bool]:
        """What the drain reads from its listener, as a look at whether it changed (a failing read is
        noted on the drain's next turn, by `ask`)."""
        try:
            return self.listener.deadline(), self.listener.admits_newcomers()
        except Exception:  # noqa: BLE001 - the turn's own read notes it; a look must not
            return None, False

    def timeout(self) -> float:
        """How long the caller may wait before the next `turn`: until the drain's next due time (one the
        scan in flight answers is not), the end of a held wave's wait or, with changes not yet published,
        the next publication. A change from outside rings the caller's wait sooner."""
        now = self.clock.monotonic()
        timeout = self.core.timeout(now, scanning=self.scanning or bool(self.held))
        if self.held:
            timeout = min(timeout, max(0.0, self.held_until - now))
        if self.dirty:
            timeout = min(timeout, max(0.0, self.published + PUBLISH_INTERVAL - now))
        return timeout

    def wants_scan(self) -> bool:
        """A scan is due: the caller scans (or has one made) and hands it to `scanned`."""
        if self.scanning or self.held or self.core.done or self.interrupted():
            return False  # (a held wave goes first: what the next scan finds depends on it)
        self.scanning = self.core.wants_scan(self.clock.monotonic())
        return self.scanning

    def scanned(self, holders: Sequence[Holder] | None, error: str = "") -> None:
        """The scan asked for: its holders (None: it failed, `error` says why). A pending process missing
        from it but running has released the device."""
        self.scanning = False
        if holders is None:
            self.note(f"scan failed: {error}")
        else:
            self.hook(self.listener.holders_seen, holders)
        if self.interrupted() or self.core.done:
            return
        seen = {h.identity for h in holders or ()}
        running = {i for i in self.core.pending() if i not in seen and self.exits.running(i)}
        admit = self.admits_newcomers()
        self.act(self.core.observe_scan(holders, running, self.clock.monotonic(), admit_new=admit))

    def exited(self, exited: Sequence[tuple[ProcessIdentity, ExitStatus]]) -> None:
        """Exits seen (the pidfds polled), then whatever the time decides."""
        now = self.clock.monotonic()
        for identity, status in exited:
            self.core.observe_exit(identity, status, now)
        if not self.interrupted() and not self.held:
            self.core.observe_time(now)
        self.dirty = self.dirty or bool(exited) or self.core.done

    def act(self, actions: list[SendSignal]) -> None:
        """Write the wave ahead; send it when that is done (or held, `release`), then watch every pending
        process for its exit."""
        if self.cancel.is_set():
            actions = []  # the event went away: nobody new is signalled, and nothing is killed
        self.signaller.prepare(a.identity for a in actions)
        if actions:
            intents = [(a.identity, a.signum) for a in actions]
            if not self.ask_bool(self.listener.before_signals, intents, self.core.record):
                self.held, self.held_until = actions, self.clock.monotonic() + WRITE_AHEAD_WAIT
                return
        self.send(actions)

    def release(self) -> None:
        """The held wave's write-ahead is done (or its wait is over): it goes out now."""
        actions, self.held, self.held_until = self.held, [], float("inf")
        if actions:
            self.send(actions)

    def send(self, actions: list[SendSignal]) -> None:
        done: list[tuple[ProcessIdentity, int, SignalResult]] = []
        for action in actions:
            if self.cancel.is_set() or (action.at is At.DEADLINE and self.stop.is_set()):
                break  # the drain ends as cancelled/interrupted; no SIGKILL after either
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
        """Hand `updated` a copy of the record: when it changed, at most every PUBLISH_INTERVAL (a copy of
        hundreds of records per exit would slow the drain), and always at the end."""
        now = self.clock.monotonic()
        if not self.dirty:
            return
        if not final and now < self.published + PUBLISH_INTERVAL:
            return
        self.dirty, self.published = False, now
        self.hook(self.listener.updated, copy.deepcopy(self.core.record))

    def close(self) -> None:
        for identity in self.exits.watching():
            self.exits.unwatch(identity)

    def hook(self, fn: Callable[..., None], *args: object) -> None:
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - a failing hook (state file, status) must not stop a drain
            self.note(f"{getattr(fn, '__name__', 'hook')} failed: {type(e).__name__}: {e}")

    def ask_bool(self, fn: Callable[..., bool], *args: object) -> bool:
        """A hook that answers (the write-ahead): only False holds the wave; a failing one (or one that
        answers nothing) lets it go."""
        try:
            return fn(*args) is not False
        except Exception as e:  # noqa: BLE001 - as for hooks: noted, and the drain goes on
            self.note(f"{getattr(fn, '__name__', 'hook')} failed: {type(e).__name__}: {e}")
            return True

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
