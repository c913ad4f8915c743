"""The soak's processes: spawned, reaped and heard by threads of their own, so each fact is timed when it
happens, whatever the driver's loop is doing (waiting for a daemon to stop, reading a state file)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Hashable, Sequence
from pathlib import Path

# A holder: appends "SERIAL PID WHAT TIME [START_TIME]" to the shared log (one write: appends do not mix),
# "open" just before it opens the device, "term" for every SIGTERM it receives (timed as the handler runs),
# "release" when it closes the device. handled exits 0 on SIGTERM; report carries on holding (it needs the
# SIGKILL); release closes the device and carries on. The node has no driver, so O_PATH
# (tests/support/workloads.py `UniqueDevice`).
HOLDER = r"""
import os, signal, sys, time
serial, mode, device, log = sys.argv[1:5]
out = os.open(log, os.O_WRONLY | os.O_APPEND)
held = []
def say(what, at, extra=""):
    os.write(out, f"{serial} {os.getpid()} {what} {at:.6f}{extra}\n".encode())
def term(*_):
    say("term", time.time())
    if mode == "handled":
        os._exit(0)
    if mode == "release" and held:
        os.close(held.pop())
        say("release", time.time())
signal.signal(signal.SIGTERM, term)
with open("/proc/self/stat") as f:
    start = f.read().rsplit(")", 1)[1].split()[19]
at = time.time()
held.append(os.open(device, os.O_PATH))
say("open", at, f" {start}")
while True:
    signal.pause()
"""
BUSY = "while True: pass"


class Reaper:
    """waitpid(-1) in a thread: each child's death and exit code, timed as it is reaped. As init of the PID
    namespace the driver reaps orphans too. Children are spawned under the lock, so a child that dies at
    once is still known by its key when the reaper records it."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.live: dict[int, Hashable] = {}
        self.pidfds: dict[Hashable, int] = {}  # signals go through these: never to a reused PID
        self.deaths: dict[Hashable, tuple[float, int]] = {}
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="reaper", daemon=True)
        self.thread.start()

    def spawn(self, key: Hashable, argv: Sequence[str], *, stderr: Path | None = None,
              env: dict[str, str] | None = None) -> int:  # fmt: skip
        actions = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0)]
        actions.append((os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0))
        if stderr is not None:
            actions.append(
                (os.POSIX_SPAWN_OPEN, 2, str(stderr), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            )
        with self.cond:
            pid = os.posix_spawn(argv[0], list(argv), env or dict(os.environ), file_actions=actions)
            self.live[pid] = key
            self.pidfds[key] = os.pidfd_open(pid)
            self.cond.notify_all()
        return pid

    def kill(self, key: Hashable, signum: int) -> None:
        """Signal a child through its pidfd (a no-op once it is gone)."""
        with self.cond:
            fd = self.pidfds.get(key)
            if fd is not None:
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(fd, signum)

    def death(self, key: Hashable) -> tuple[float, int] | None:
        with self.cond:
            return self.deaths.get(key)

    def wait(self, key: Hashable, timeout: float) -> tuple[float, int] | None:
        with self.cond:
            self.cond.wait_for(lambda: key in self.deaths, timeout)
            return self.deaths.get(key)

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        self.thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:  # no child right now: wait for a spawn (or the end)
                with self.cond:
                    if self.stopping:
                        return
                    self.cond.wait(0.5)
                continue
            at = time.time()
            with self.cond:
                key = self.live.pop(pid, None)
                if key is not None:
                    self.deaths[key] = (at, os.waitstatus_to_exitcode(status))
                    os.close(self.pidfds.pop(key))
                self.cond.notify_all()


class Notifications:
    """The daemons' sd_notify datagrams, each with its sender's PID (SO_PASSCRED): READY=1, timed as it
    arrives, for the daemon run that sent it."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)  # how soon the thread notices `close`
        self.ready: dict[int, list[float]] = {}  # by sender PID: the times of its READY=1s
        self.closing = False
        self.thread = threading.Thread(target=self._run, name="notify", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.closing = True
        self.thread.join(timeout=5)
        self.sock.close()

    def _run(self) -> None:
        while not self.closing:
            try:
                data, ancillary, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(12))
            except TimeoutError:
                continue
            at = time.time()
            pids = [struct.unpack("3i", payload[:12])[0] for level, kind, payload in ancillary
                    if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS]  # fmt: skip
            if b"READY=1" in data and pids:
                self.ready.setdefault(pids[0], []).append(at)


def json_logs_supported() -> bool:
    """Whether this daemon has `--log-format json` (the checker reads the text format too, to the second)."""
    text = subprocess.run([sys.executable, "-m", "watchdog", "run", "--help"], capture_output=True, text=True)
    return "--log-format" in text.stdout
