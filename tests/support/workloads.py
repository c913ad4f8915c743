"""Real child processes holding a real device node, each behaving like one kind of TPU workload.

Each child opens the device, then reports on its own pipe ("ready PID", "term", "released", ...), so tests
wait on what a child says, never on a sleep. `Workloads.close()` SIGKILLs and reaps every child.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import random
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection, Sequence
from pathlib import Path

from tests.support.readable import readable
from watchdog.core.process import Holder, ProcessIdentity
from watchdog.host.holders import HolderScanner, ScanResult
from watchdog.host.procfs import Procfs, start_time

# Modes: default (SIGTERM's default action), handled (saves, exits 0), slow (exits 0 ~1 s after SIGTERM),
# ignore (SIG_IGN: needs SIGKILL), release (closes the device on SIGTERM, keeps running; opens it again on
# SIGUSR2: `reopen`), gate (on SIGTERM
# says "term", exits 0 when its stdin closes), fork (handled, plus a child of its own holding the device
# with the default action), report (says "term"/"usr1" for each signal, never exits), block (SIGTERM blocked:
# once sent it stays pending, which /proc/PID/status shows: `sigterm_pending`).
CHILD = r"""
import os, signal, sys, time
mode, device, out = sys.argv[1], sys.argv[2], int(sys.argv[3])
dev = os.open(device, os.O_RDONLY)
def say(text):
    os.write(out, (text + "\n").encode())
def release(*_):
    os.close(dev)
    say("released")
def reopen(*_):
    global dev
    dev = os.open(device, os.O_RDONLY)
    say("reopened")
def gate(*_):
    say("term")
    sys.stdin.read()
    os._exit(0)
if mode == "handled":
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
elif mode == "slow":
    signal.signal(signal.SIGTERM, lambda *_: (time.sleep(1.0), os._exit(0)))
elif mode == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
elif mode == "release":
    signal.signal(signal.SIGTERM, release)
    signal.signal(signal.SIGUSR2, reopen)
elif mode == "gate":
    signal.signal(signal.SIGTERM, gate)
elif mode == "report":
    signal.signal(signal.SIGTERM, lambda *_: say("term"))
    signal.signal(signal.SIGUSR1, lambda *_: say("usr1"))
elif mode == "block":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
elif mode == "fork":
    if os.fork() == 0:
        say(f"grandchild {os.getpid()}")
        while True:
            signal.pause()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
say(f"ready {os.getpid()}")
while True:
    signal.pause()
"""


# /dev/full's numbers: what `make_device` nodes carry. sysfs says class mem (the kernel's own), which is never
# a TPU device, so whatever scans such a node names this number in devices.allow_numbers (`--allow-number`).
TEST_NUMBER = (1, 7)
TEST_ALLOW = "1:7"


def make_device(directory: Path, name: str = "accel0") -> Path:
    """A real character device node on ext4, like /dev/accel0, that any process can open. Its numbers are
    /dev/full's (TEST_NUMBER), not /dev/null's (1,3): the scanner also matches by device number, and nearly
    every process holds /dev/null (a drain over such a scan would signal them all: `OwnScanner` is the guard
    against that). A scan watches it only when told to (TEST_ALLOW in devices.allow_numbers): the rule
    refuses the kernel's own devices. `UniqueDevice`'s numbers need no such word."""
    path = directory / name
    os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(*TEST_NUMBER))
    return path


# Character majors the kernel's devices.txt reserves for local or experimental use. Dynamic majors are handed
# out from 254 downwards, so none of these ever gets a driver unless someone registers one on purpose.
LOCAL_MAJORS = (60, 61, 62, 63, 120, 121, 122, 123, 124, 125, 126, 127)
HOLD_FLAGS = os.O_PATH  # how a holder opens a UniqueDevice: it has no driver, so a plain open() is ENXIO
CLAIMS = Path(tempfile.gettempdir()) / "tpu-watchdog-device-numbers"


class UniqueDevice:
    """A device node whose numbers nothing else on this machine holds, for as long as it is open.

    /dev/full's numbers (1:7) are held by other runs too, and the scanner matches by device number: a daemon
    elsewhere on the machine (a demo, another test run) whose scanner is not narrowed would signal our
    holders. A pseudo-terminal's slave (136:N, unique while its pair lives) does not work: the scanner refuses
    every terminal major as held by everyone, and the tty layer refuses (EIO) a pts opened through a node
    outside devpts. So the number is one of a local-use major with no driver (checked in /proc/devices),
    claimed under an flock in a directory all users of this class share: two runs never get the same one. As
    there is no driver, open() fails for everyone, so no other process can hold it by accident. Holders open
    it with O_PATH (HOLD_FLAGS): a real fd on the real node, which the scanner finds by path and (through
    stat) by device number, as it finds /dev/accel0.
    """

    def __init__(self, directory: Path, name: str = "accel0") -> None:
        CLAIMS.mkdir(exist_ok=True)
        registered = _char_majors()
        majors = [m for m in LOCAL_MAJORS if m not in registered]
        rng = random.SystemRandom()
        for _ in range(64):
            major, minor = rng.choice(majors), rng.randrange(1 << 20)
            claim = CLAIMS / f"{major}-{minor}"
            fd = os.open(claim, os.O_RDWR | os.O_CREAT, 0o600)
            if _locked(fd, claim):
                break
            os.close(fd)
        else:
            raise RuntimeError(f"no free device number claimed in {CLAIMS}")
        self._claim, self._fd = claim, fd
        self.rdev = os.makedev(major, minor)
        self.path = directory / name
        os.mknod(self.path, stat.S_IFCHR | 0o600, self.rdev)

    def close(self) -> None:
        """Release the number (the node itself goes with its directory)."""
        if self._fd >= 0:
            self._claim.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> UniqueDevice:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _char_majors() -> set[int]:
    text = Path("/proc/devices").read_text()
    chars = text.split("Block devices:")[0]
    return {int(line.split()[0]) for line in chars.splitlines() if line.strip()[:1].isdigit()}


def _locked(fd: int, claim: Path) -> bool:
    """Our flock on `claim`, and still the file at that path (a releaser unlinks it while holding the lock,
    so a lock taken on the unlinked file claims nothing)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return os.fstat(fd).st_ino == os.stat(claim).st_ino
    except (BlockingIOError, FileNotFoundError):
        return False


class Child:
    """One workload process and the read end of its report pipe."""

    def __init__(self, mode: str, device: Path, new_session: bool = False) -> None:
        read_end, write_end = os.pipe()
        self.out = read_end
        self._buffer = b""
        self.popen = subprocess.Popen(
            [sys.executable, "-c", CHILD, mode, str(device), str(write_end)],
            pass_fds=(write_end,),
            stdin=subprocess.PIPE,
            start_new_session=new_session,
        )
        os.close(write_end)
        self.mode = mode
        self.grandchild_pidfd: int | None = None
        self.grandchild: ProcessIdentity | None = None
        self.identity = ProcessIdentity(self.popen.pid, 0)

    def wait_ready(self) -> None:
        """Wait until the child (and its own child, in fork mode) holds the device; learn who it is."""
        expected = {"ready", "grandchild"} if self.mode == "fork" else {"ready"}
        lines = [self.expect("") for _ in expected]
        for line in lines:
            if line.startswith("grandchild"):  # the two say it in either order
                pid = int(line.split()[1])
                self.grandchild_pidfd = os.pidfd_open(pid)
                start = start_time(pid)
                assert start is not None
                self.grandchild = ProcessIdentity(pid, start)
        assert {line.split()[0] for line in lines} == expected, lines
        start = start_time(self.popen.pid)
        assert start is not None
        self.identity = ProcessIdentity(self.popen.pid, start)

    def expect(self, prefix: str, timeout: float = 20.0) -> str:
        """The next line the child says, which must start with `prefix`."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            ready = readable([self.out], left)
            chunk = os.read(self.out, 4096) if ready else b""
            if not chunk:
                raise AssertionError(f"child {self.popen.pid} said nothing starting with {prefix!r}")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        text = line.decode()
        assert text.startswith(prefix), f"child {self.popen.pid} said {text!r}, expected {prefix!r}"
        return text

    def alive(self) -> bool:
        return self.popen.poll() is None

    def sigterm_pending(self) -> bool:
        """Whether a SIGTERM was sent to it and not yet taken: the kernel's word (/proc/PID/status, the
        process's and its thread's pending sets), which a `block` child keeps until it dies."""
        bit = 1 << (signal.SIGTERM - 1)
        fields = dict(
            line.split(":", 1) for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines()
        )
        return any(int(fields[name].strip(), 16) & bit for name in ("SigPnd", "ShdPnd"))

    def reopen(self) -> None:
        """A release-mode child opens the device again (after it closed it on SIGTERM)."""
        os.kill(self.popen.pid, signal.SIGUSR2)
        self.expect("reopened")

    def open_gate(self) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.close()

    def close(self) -> None:
        if self.grandchild_pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.grandchild_pidfd, signal.SIGKILL)
            os.close(self.grandchild_pidfd)
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(timeout=20)
        if self.popen.stdin is not None:
            self.popen.stdin.close()
        os.close(self.out)


class Workloads:
    """The children of one test, all holding `device`; closing kills and reaps them all."""

    def __init__(self, directory: Path) -> None:
        self.device = make_device(directory)
        self.children: list[Child] = []

    def start(self, mode: str, new_session: bool = False) -> Child:
        child = Child(mode, self.device, new_session)
        self.children.append(child)
        child.wait_ready()
        return child

    def identities(self) -> set[ProcessIdentity]:
        """Every process this test started (children and their own children)."""
        found = {c.identity for c in self.children}
        return found | {c.grandchild for c in self.children if c.grandchild is not None}

    def close(self) -> None:
        for child in self.children:
            child.close()


class HostProcfs(Procfs):
    """The real /proc, listing only the processes of one `Workloads`: what a machine of their own would show.
    For tests that run many daemons in one process, each standing in for a VM (tests/system/test_fleet.py):
    there, 50 scans of this machine's whole /proc at a time (every test's processes) are work no real host
    does, and in one process (one GIL) they starved the daemons under load."""

    def __init__(self, workloads: Workloads) -> None:
        super().__init__()
        self.workloads = workloads

    def pids(self) -> list[int]:
        own = {identity.pid for identity in self.workloads.identities()}
        return [pid for pid in super().pids() if pid in own]


class OwnScanner:
    """The real `HolderScanner` on the test's node, narrowed to the test's own processes: whatever else
    shares the node's device number, a test never drains (signals) anything it did not start. With
    `host_only`, it also reads only their entries of /proc (`HostProcfs`); `node_root`: where the kubelet's
    files are (a fixture node)."""

    def __init__(self, workloads: Workloads, host_only: bool = False, node_root: str | None = None) -> None:
        self.workloads = workloads
        self.inner = HolderScanner(
            patterns=[str(workloads.device)], node_root=node_root, allow_numbers=[TEST_NUMBER]
        )
        if host_only:
            self.inner.procfs = HostProcfs(workloads)

    def scan(self) -> ScanResult:
        result = self.inner.scan()
        own = self.workloads.identities()
        return dataclasses.replace(result, holders=tuple(h for h in result.holders if h.identity in own))

    def recheck(self, holders: Sequence[Holder]) -> list[Holder]:
        """The real re-check of the warm index (the daemon's first wave), narrowed the same way."""
        own = self.workloads.identities()
        return [h for h in self.inner.recheck(holders) if h.identity in own]

    def newcomers(self, known: Collection[int], after: int | None = None) -> list[Holder]:
        """The real scan of the processes the index has not seen (first wave too), narrowed the same way."""
        own = self.workloads.identities()
        return [h for h in self.inner.newcomers(known, after) if h.identity in own]
