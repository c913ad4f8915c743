"""Noticing exits as they happen: poll(2) on the pidfds of the watched processes (readable once the process
has exited), so the drain wakes at the exit itself, not at the next tick of a sleep loop.

Another thread ends a wait at once by ringing a `Wakeup` (an eventfd polled with the pidfds): what a drain
must react to (the event went away, the deadline moved, the daemon is stopping) wakes it, with no polling.

Also answers the two questions around an exit: is a process still running (not exited, not in the middle
of exiting — that is how "released the device" is told from "exiting"), and how did it end.
"""

from __future__ import annotations

import contextlib
import math
import os
import select

from watchdog.core.drain_record import UNKNOWN_EXIT, ExitStatus, SignalResult
from watchdog.core.process import ProcessIdentity
from watchdog.host.procfs import PROC, read_stat
from watchdog.host.signals import Handle, ProcessHandles


def exit_status(handle: Handle, proc_root: str = PROC) -> ExitStatus:
    """How an exited process ended. Our own children: waitid(P_PIDFD, WNOWAIT), which does not reap them.
    Others: field 52 of /proc/PID/stat while it is still a zombie (shown only to root or its owner; before
    its parent reaps it). Otherwise unknown."""
    if handle.pidfd is not None:
        try:
            info = os.waitid(os.P_PIDFD, handle.pidfd, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except (ChildProcessError, OSError):
            info = None  # not our child (ECHILD), or already reaped
        if info is not None:
            if info.si_code == os.CLD_EXITED:
                return ExitStatus(code=info.si_status)
            if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
                return ExitStatus(signal=info.si_status)
    try:
        stat = read_stat(handle.identity.pid, proc_root)
    except PermissionError:
        return UNKNOWN_EXIT
    if (
        stat is not None
        and stat.exit_code is not None
        and stat.state == "Z"
        and stat.start_time == handle.identity.start_time
    ):
        return ExitStatus.from_wait_status(stat.exit_code)
    return UNKNOWN_EXIT


class Wakeup:
    """Ends a waiter's wait from another thread (or a signal handler): `ring()` makes the eventfd readable
    until the waiter has woken. A ring before the wait is kept, so none is lost between a look at what
    changed and the wait."""

    def __init__(self) -> None:
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

    def ring(self) -> None:
        with contextlib.suppress(OSError):  # closed (the daemon is going), or full: rung either way
            os.eventfd_write(self.fd, 1)

    def clear(self) -> None:
        with contextlib.suppress(OSError):  # not rung (EAGAIN), or closed
            os.eventfd_read(self.fd)

    def close(self) -> None:
        os.close(self.fd)


class PidfdExitWaiter:
    """Waits for watched processes to exit, or for `wake` to be rung. Processes without a pidfd (fallback)
    are re-checked every `fallback_interval` s instead."""

    def __init__(
        self, handles: ProcessHandles, *, fallback_interval: float = 0.02, wake: Wakeup | None = None
    ) -> None:
        self.handles = handles
        self._fallback_interval = fallback_interval
        self._poll = select.poll()
        self._by_fd: dict[int, ProcessIdentity] = {}
        self._without_fd: set[ProcessIdentity] = set()
        self._wake = wake
        if wake is not None:
            self._poll.register(wake.fd, select.POLLIN)

    def watch(self, identity: ProcessIdentity) -> SignalResult | None:
        """Start watching; None if watching, GONE / IDENTITY_CHANGED if the process is already gone."""
        handle = self.handles.open(identity)
        if isinstance(handle, SignalResult):
            return handle
        if handle.pidfd is None:
            self._without_fd.add(identity)
        elif handle.pidfd not in self._by_fd:
            self._by_fd[handle.pidfd] = identity
            self._poll.register(handle.pidfd, select.POLLIN)
        return None

    def watching(self) -> set[ProcessIdentity]:
        return set(self._by_fd.values()) | self._without_fd

    def wait(self, timeout: float) -> list[tuple[ProcessIdentity, ExitStatus]]:
        """Block until a watched process exits, `wake` is rung or `timeout` s pass; the exits seen, with how
        each ended (none, when woken)."""
        if self._without_fd:
            timeout = min(timeout, self._fallback_interval)
        ready = self._poll.poll(max(0, math.ceil(timeout * 1000)))
        if self._wake is not None and any(fd == self._wake.fd for fd, _ in ready):
            self._wake.clear()
        exited = [self._by_fd[fd] for fd, _ in ready if fd in self._by_fd]
        exited += [i for i in self._without_fd if not self._alive(i)]
        results = []
        for identity in exited:
            handle = self.handles.get(identity)
            status = exit_status(handle, self.handles.proc_root) if handle is not None else UNKNOWN_EXIT
            results.append((identity, status))
            self.unwatch(identity)
        return results

    def running(self, identity: ProcessIdentity) -> bool:
        """True if the process is alive and not exiting (false when unsure: then it is not 'released')."""
        handle = self.handles.get(identity)
        if handle is not None and handle.pidfd is not None:
            probe = select.poll()
            probe.register(handle.pidfd, select.POLLIN)
            if probe.poll(0):
                return False
        try:
            stat = read_stat(identity.pid, self.handles.proc_root)
        except PermissionError:
            return False
        return (
            stat is not None
            and stat.start_time == identity.start_time
            and stat.state not in ("Z", "X", "x")
            and not stat.is_exiting
        )

    def unwatch(self, identity: ProcessIdentity) -> None:
        """Stop watching and close the pidfd."""
        handle = self.handles.get(identity)
        if handle is not None and handle.pidfd is not None and handle.pidfd in self._by_fd:
            self._poll.unregister(handle.pidfd)
            del self._by_fd[handle.pidfd]
        self._without_fd.discard(identity)
        self.handles.forget(identity)

    def close(self) -> None:
        for identity in self.watching():
            self.unwatch(identity)

    def _alive(self, identity: ProcessIdentity) -> bool:
        try:
            stat = read_stat(identity.pid, self.handles.proc_root)
        except PermissionError:
            return True
        return stat is not None and stat.start_time == identity.start_time and stat.state != "Z"
