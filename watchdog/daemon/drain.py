"""`drain(...)`: SIGTERM the TPU holders, wait for them to exit or the deadline, then SIGKILL what is left.

The loop at the edge around the pure `DrainCore`: it reads the injected clock, runs the scanner, sends
through the signaller, and waits on the exit waiter (poll(2) on pidfds, so an exit is noticed as it happens).

Cancellation (`cancel`: the event went away; `stop`: the daemon is shutting down) is noticed by bounding each
poll to `POLL_CAP` (0.1 s) rather than with a wakeup fd: a `threading.Event` has no fd, and giving it one
would need either every setter to know about the drain or a helper thread per drain. A drain is rare and
short, so ten idle wakeups a second cost nothing, and both events are noticed within ~0.1 s.
"""

from __future__ import annotations

import copy
import signal
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Protocol

from watchdog.core.clock import Clock, SystemClock
from watchdog.core.drain import DrainCore, SendSignal
from watchdog.core.drain_record import DrainRecord, ExitStatus, OnTimeout, SignalResult
from watchdog.core.process import Holder, ProcessIdentity
from watchdog.host.exits import PidfdExitWaiter
from watchdog.host.signals import DryRunSignaller, PidfdSignaller, ProcessHandles

__all__ = ["DEFAULT_GRACE", "POLL_CAP", "ExitWaiter", "Scanner", "Signaller", "drain"]

DEFAULT_GRACE = 300.0  # Cloud TPU Autocheckpoint: SIGTERM, then up to 5 minutes before maintenance proceeds
POLL_CAP = 0.1  # longest wait between looks at cancel/stop (see the module docstring)
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


def drain(
    holders: Sequence[Holder],
    *,
    scanner: Scanner,
    grace: float | None = None,
    deadline: float | None = None,
    on_timeout: OnTimeout = "kill",
    dry_run: bool = False,
    cancel: threading.Event | None = None,
    stop: threading.Event | None = None,
    already_signalled: Mapping[ProcessIdentity, Collection[int]] | None = None,
    on_intent: Callable[[ProcessIdentity, int], None] | None = None,
    on_sent: Callable[[ProcessIdentity, int, SignalResult], None] | None = None,
    on_update: Callable[[DrainRecord], None] | None = None,
    clock: Clock | None = None,
    signaller: Signaller | None = None,
    exits: ExitWaiter | None = None,
    rescan_interval: float = 1.0,
    kill_wait: float = 10.0,
    proc_root: str = "/proc",
    deadline_source: Callable[[], float] | None = None,
    on_intents: Callable[[Sequence[tuple[ProcessIdentity, int]]], None] | None = None,
    on_sents: Callable[[Sequence[tuple[ProcessIdentity, int, SignalResult]]], None] | None = None,
) -> DrainRecord:
    """Drain `holders` (a fresh scan) and return the record.

    The deadline is `deadline` (absolute, monotonic seconds of `clock`: resuming a drain) or now + `grace`
    (default 300 s). `already_signalled` lists signals an earlier run sent (SIGTERM is never sent twice;
    SIGKILL still goes out on time). `on_intent` is called BEFORE each signal (persist it: write-ahead),
    `on_sent` after; `on_update` gets a copy of the record when it changed (at most every 0.1 s, and at
    the end). Hook errors are noted in the record, never raised: a failing hook must not stop a drain.
    `on_intents` / `on_sents` are the same for a whole wave of signals at once (one write-ahead for a hundred
    holders instead of a hundred: all intents of the wave are persisted before its first signal).
    `dry_run` sends nothing (signal 0 checks). `deadline_source`, read on every turn of the loop, may move the
    deadline earlier (monotonic seconds of `clock`), never later.
    Signaller and exit waiter default to pidfd ones sharing one `ProcessHandles`, closed at the end.
    """
    if grace is not None and deadline is not None:
        raise ValueError("give either grace (relative) or deadline (absolute), not both")
    if grace is not None and not grace >= 0:
        raise ValueError(f"grace must be >= 0 s, not {grace!r}")
    if signaller is not None and dry_run and not signaller.dry_run:
        raise ValueError("dry_run=True needs a dry-run signaller: refusing to send real signals")
    clock = clock or SystemClock()
    cancel = cancel if cancel is not None else threading.Event()
    stop = stop if stop is not None else threading.Event()
    owned: ProcessHandles | None = None
    if signaller is None or exits is None:
        owned = ProcessHandles(proc_root)
        signaller = signaller or (DryRunSignaller(owned) if dry_run else PidfdSignaller(owned))
        exits = exits or PidfdExitWaiter(owned)
    now = clock.monotonic()
    core = DrainCore(
        holders,
        now=now,
        now_wall=clock.wall(),
        deadline=deadline if deadline is not None else now + (DEFAULT_GRACE if grace is None else grace),
        on_timeout=on_timeout,
        dry_run=dry_run or signaller.dry_run,
        already_signalled=already_signalled,
        rescan_interval=rescan_interval,
        kill_wait=kill_wait,
    )
    loop = _Loop(core, scanner, signaller, exits, clock, on_intent, on_sent, on_update, deadline_source)
    loop.on_intents, loop.on_sents = on_intents, on_sents
    try:
        loop.run(core.start(), cancel, stop)
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
        on_intent: Callable[[ProcessIdentity, int], None] | None,
        on_sent: Callable[[ProcessIdentity, int, SignalResult], None] | None,
        on_update: Callable[[DrainRecord], None] | None,
        deadline_source: Callable[[], float] | None = None,
    ) -> None:
        self.core, self.scanner, self.signaller, self.exits = core, scanner, signaller, exits
        self.deadline_source = deadline_source
        self.on_intents: Callable[[Sequence[tuple[ProcessIdentity, int]]], None] | None = None
        self.on_sents: Callable[[Sequence[tuple[ProcessIdentity, int, SignalResult]]], None] | None = None
        self.clock = clock
        self.on_intent, self.on_sent, self.on_update = on_intent, on_sent, on_update
        self.dirty, self.published = True, float("-inf")

    def run(self, actions: list[SendSignal], cancel: threading.Event, stop: threading.Event) -> None:
        core = self.core
        self.act(actions, cancel, stop)
        while not core.done:
            if self.deadline_source is not None and core.move_deadline(
                self.deadline_source(), self.clock.monotonic()
            ):
                self.dirty = True
            if stop.is_set():
                core.interrupt(self.clock.monotonic())
            elif cancel.is_set():
                core.cancel(self.clock.monotonic())
            elif core.wants_scan(self.clock.monotonic()):
                self.act(self.rescan(), cancel, stop)
            else:
                exited = self.exits.wait(min(core.timeout(self.clock.monotonic()), POLL_CAP))
                for identity, status in exited:
                    core.observe_exit(identity, status, self.clock.monotonic())
                core.observe_time(self.clock.monotonic())
                self.dirty = self.dirty or bool(exited) or core.done
            self.publish()
        self.publish(final=True)

    def rescan(self) -> list[SendSignal]:
        """Scan; a pending process missing from the scan but running has released the device."""
        try:
            holders: Sequence[Holder] | None = tuple(self.scanner.scan().holders)
        except Exception as e:  # noqa: BLE001 - a failed scan must not end the drain; it is noted instead
            holders = None
            self.note(f"scan failed: {type(e).__name__}: {e}")
        seen = {h.identity for h in holders or ()}
        running = {i for i in self.core.pending() if i not in seen and self.exits.running(i)}
        return self.core.observe_scan(holders, running, self.clock.monotonic())

    def act(self, actions: list[SendSignal], cancel: threading.Event, stop: threading.Event) -> None:
        """Send each signal (intent first, result after), then watch every pending process for its exit."""
        self.signaller.prepare(a.identity for a in actions)
        if actions and self.on_intents is not None:
            self.hook(self.on_intents, [(a.identity, a.signum) for a in actions])
        done: list[tuple[ProcessIdentity, int, SignalResult]] = []
        for action in actions:
            if action.signum == signal.SIGKILL and (cancel.is_set() or stop.is_set()):
                break  # the loop ends the drain as cancelled/interrupted; no SIGKILL after either
            self.hook(self.on_intent, action.identity, action.signum)
            result = self.signaller.send(action.identity, action.signum)
            self.hook(self.on_sent, action.identity, action.signum, result)
            done.append((action.identity, action.signum, result))
            self.core.observe_signal(action.identity, action.signum, result, self.clock.monotonic())
        if done and self.on_sents is not None:
            self.hook(self.on_sents, done)
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
        if self.on_update is None or not self.dirty:
            return
        if not final and now < self.published + PUBLISH_INTERVAL:
            return
        self.dirty, self.published = False, now
        self.hook(self.on_update, copy.deepcopy(self.core.record))

    def hook(self, fn: Callable[..., None] | None, *args: object) -> None:
        if fn is None:
            return
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - a failing hook (state file, status) must not stop a drain
            self.note(f"{getattr(fn, '__name__', 'hook')} failed: {type(e).__name__}: {e}")

    def note(self, text: str) -> None:
        if len(self.core.record.notes) < 100:  # bounded: a hook failing on every signal must not flood it
            self.core.record.notes.append(text)
            self.dirty = True
