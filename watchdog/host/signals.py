"""Race-free signalling: a signal reaches the process that was scanned, never a later one that reused its PID.

How: open a pidfd first (`os.pidfd_open`), then re-read the start time (field 22 of /proc/PID/stat). If it
still matches, the pidfd refers to the scanned process for as long as it stays open, whatever happens to the
PID number; every later signal goes through it (`signal.pidfd_send_signal`). The pidfd is kept: the drain
polls it for the exit (`watchdog/host/exits.py`).

Fallback where pidfds are unavailable (ENOSYS, kernel < 5.3): re-check the start time before every
`os.kill`. The narrow race left: between that re-check and the kill, the process exits, is reaped, and its PID
is handed to a new process — the PID space must wrap within microseconds, which does not happen in practice.
"""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass

from watchdog.core.drain_record import SignalResult
from watchdog.core.process import ProcessIdentity
from watchdog.host.procfs import PROC, ProcStat, read_stat, start_time

__all__ = ["DryRunSignaller", "Handle", "PidfdSignaller", "ProcessHandles", "SignalResult"]


def protected(pid: int, stat: ProcStat | None) -> bool:
    """PID 1, this process, or a kernel thread: never signalled, whatever a scan claims (the scanner leaves
    them out; this is the last line, right before the syscall)."""
    if pid <= 1 or pid == os.getpid():
        return True
    return stat is not None and stat.is_kernel_thread


@dataclass(frozen=True)
class Handle:
    """A process verified to be `identity`: its pidfd, or None where pidfds are unavailable (fallback)."""

    identity: ProcessIdentity
    pidfd: int | None


class ProcessHandles:
    """One verified pidfd per identity, opened once and shared by the signaller and the exit waiter."""

    def __init__(self, proc_root: str = PROC, use_pidfd: bool = True) -> None:
        self.proc_root = proc_root
        self.use_pidfd = use_pidfd and hasattr(os, "pidfd_open")
        self._handles: dict[ProcessIdentity, Handle] = {}

    def open(self, identity: ProcessIdentity) -> Handle | SignalResult:
        """The handle of `identity`; GONE / IDENTITY_CHANGED if that process no longer exists; PROTECTED
        for PID 1, this process or a kernel thread."""
        handle = self._handles.get(identity)
        if handle is not None:
            return handle
        if protected(identity.pid, None):
            return SignalResult.PROTECTED
        fd = self._pidfd_open(identity.pid) if self.use_pidfd else None
        if fd == -1:
            return SignalResult.GONE
        try:
            stat = read_stat(identity.pid, self.proc_root)
        except PermissionError:  # hidepid=: we may not look, so we may not signal
            if fd is not None:
                os.close(fd)
            return SignalResult.DENIED
        if protected(identity.pid, stat):
            if fd is not None:
                os.close(fd)
            return SignalResult.PROTECTED
        now = None if stat is None else stat.start_time  # None (gone, or no stat line) never matches
        if now != identity.start_time:
            if fd is not None:
                gone = _pidfd_gone(fd)
                os.close(fd)
                if gone:
                    return SignalResult.GONE
            return SignalResult.GONE if now is None else SignalResult.IDENTITY_CHANGED
        handle = Handle(identity, fd)
        self._handles[identity] = handle
        return handle

    def get(self, identity: ProcessIdentity) -> Handle | None:
        return self._handles.get(identity)

    def forget(self, identity: ProcessIdentity) -> None:
        """Close the pidfd of `identity` (it exited or is no longer of interest)."""
        handle = self._handles.pop(identity, None)
        if handle is not None and handle.pidfd is not None:
            os.close(handle.pidfd)

    def close(self) -> None:
        for identity in list(self._handles):
            self.forget(identity)

    def __enter__(self) -> ProcessHandles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _pidfd_open(self, pid: int) -> int | None:
        """A pidfd; -1 if there is no such process; None to go without (no kernel support, no free fd)."""
        try:
            return os.pidfd_open(pid)
        except ProcessLookupError:
            return -1
        except OSError as e:
            if e.errno in (errno.ENOSYS, errno.EINVAL):
                self.use_pidfd = False  # the kernel has no pidfds: fall back for good
            return None  # EMFILE and the like: this one goes without a pidfd (identity re-check per signal)


def _pidfd_gone(fd: int) -> bool:
    """True if the process behind `fd` no longer exists (signal 0 checks without sending)."""
    try:
        signal.pidfd_send_signal(fd, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


class PidfdSignaller:
    """Sends signals through verified pidfds (`ProcessHandles`); never to a process whose identity changed."""

    dry_run = False

    def __init__(self, handles: ProcessHandles | None = None, *, proc_root: str = PROC) -> None:
        self.handles = handles if handles is not None else ProcessHandles(proc_root)

    def prepare(self, identities: Iterable[ProcessIdentity]) -> None:
        """Open and verify the handles of a batch ahead of sending, so the signals then go out back to back
        (not slowed by the first receivers already exiting) and reach a multi-process job close together."""
        for identity in identities:
            self.handles.open(identity)

    def send(self, identity: ProcessIdentity, signum: int) -> SignalResult:
        handle = self.handles.open(identity)
        if isinstance(handle, SignalResult):
            return handle
        try:
            if handle.pidfd is not None:
                signal.pidfd_send_signal(handle.pidfd, self._wire(signum))
            else:
                now = start_time(identity.pid, self.handles.proc_root)
                if now != identity.start_time:
                    return SignalResult.GONE if now is None else SignalResult.IDENTITY_CHANGED
                os.kill(identity.pid, self._wire(signum))
        except ProcessLookupError:
            return SignalResult.GONE
        except PermissionError:
            return SignalResult.DENIED
        return SignalResult.SENT

    def _wire(self, signum: int) -> int:
        """The signal actually sent."""
        return signum

    def close(self) -> None:
        self.handles.close()


class DryRunSignaller(PidfdSignaller):
    """Same checks and results as `PidfdSignaller`, but sends signal 0: existence and permission are checked
    by the kernel (so DENIED is still reported), nothing is delivered."""

    dry_run = True

    def _wire(self, signum: int) -> int:
        return 0
