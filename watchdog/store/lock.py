"""One daemon per host: an exclusive lock on the state directory, held for the life of the process.

Two daemons draining at once would each send their own SIGTERM (two per process) and fight over the state
file. A second instance (a second unit, a manual `tpu-watchdog run`, a pod started before the old one has
stopped) waits for the lock a bounded time, then refuses with the holder's pid.

The lock is flock(2) on the directory itself, not on a file in it: nothing to create, so it works on a
read-only or full state directory too, and the kernel drops it the moment the holder dies (kill -9
included): there is never a stale lock to clean up. Python opens the fd non-inheritable, so a hook the
daemon runs never keeps the lock alive after the daemon.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time

from watchdog.store.statefile import StateDirError

RETRY_EVERY = 0.1  # s between tries while another daemon holds the lock


class StateDirBusyError(StateDirError):
    """Another daemon holds the state directory; the message names it and what to do."""


class StateDirLock:
    """The exclusive lock on `state_dir` (created 0700 if missing). `acquire` once; `release` or exit."""

    def __init__(self, state_dir: str, proc_locks: str = "/proc/locks") -> None:
        self.dir = os.path.abspath(state_dir)
        self._proc_locks = proc_locks
        self._fd: int | None = None

    def acquire(self, wait: float, stop: threading.Event | None = None) -> None:
        """Take the lock, waiting up to `wait` s while another daemon holds it (less if `stop` is set).
        Raises StateDirBusyError naming the holder, or StateDirError if the directory cannot be opened."""
        try:
            os.makedirs(self.dir, mode=0o700, exist_ok=True)
            fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as error:
            raise StateDirError.unusable(self.dir, error) from None
        stop = stop or threading.Event()
        began = time.monotonic()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    os.close(fd)
                    raise
            else:
                self._fd = fd
                return
            waited = time.monotonic() - began
            if waited >= wait or stop.wait(RETRY_EVERY):
                os.close(fd)
                raise StateDirBusyError(errno.EWOULDBLOCK, self._busy_message(waited))

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only fd of the open file drops the flock
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def holder_pid(self) -> int | None:
        """The pid holding the lock, from /proc/locks (None if not found, or if it lives in another PID
        namespace: /proc/locks then shows 0 or a pid of ours that means nothing)."""
        try:
            info = os.stat(self.dir)
            with open(self._proc_locks, encoding="ascii", errors="replace") as handle:
                lines = handle.read().splitlines()
        except OSError:
            return None
        wanted = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
        for line in lines:
            parts = line.split()
            # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
            if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == wanted and parts[4].isdigit():
                pid = int(parts[4])
                return pid if pid > 0 else None
        return None

    def _busy_message(self, waited: float) -> str:
        pid = self.holder_pid()
        who = f"another tpu-watchdog (pid {pid})" if pid else "another tpu-watchdog"
        return (
            f"{who} holds the state dir {self.dir}; waited {waited:.0f} s for it. Two daemons on one "
            "host would both signal every TPU process: stop the other one first (`systemctl status "
            "tpu-watchdog`, or the other pod of the DaemonSet), then start this one"
        )
