"""Noticing exits on pidfds, telling released from exiting, and how a process ended (without reaping it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.waiting import wait_for
from tests.support.wakeups import asleep
from tests.support.workloads import Workloads
from watchdog.core.drain_record import ExitStatus, SignalResult
from watchdog.core.process import ProcessIdentity
from watchdog.host.exits import PidfdExitWaiter, Wakeup
from watchdog.host.procfs import start_time
from watchdog.host.signals import ProcessHandles


@pytest.fixture
def workloads(tmp_path: Path) -> Iterator[Workloads]:
    w = Workloads(tmp_path)
    yield w
    w.close()


@pytest.fixture(params=[True, False], ids=["pidfd", "proc-polling"])
def waiter(request: pytest.FixtureRequest) -> Iterator[PidfdExitWaiter]:
    handles = ProcessHandles(use_pidfd=request.param)
    w = PidfdExitWaiter(handles)
    yield w
    w.close()
    handles.close()


def wait_exit(waiter: PidfdExitWaiter, identity: ProcessIdentity) -> str:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for who, status in waiter.wait(1.0):
            assert who == identity
            return str(status)
    raise AssertionError(f"{identity} did not exit")


def test_own_child_exit_status_without_reaping(workloads: Workloads, waiter: PidfdExitWaiter) -> None:
    handled = workloads.start("handled")
    default = workloads.start("default")
    assert waiter.watch(handled.identity) is None
    assert waiter.watch(default.identity) is None
    assert waiter.wait(0) == []
    os.kill(handled.identity.pid, signal.SIGTERM)
    assert wait_exit(waiter, handled.identity) == "exited 0"
    os.kill(default.identity.pid, signal.SIGTERM)
    assert wait_exit(waiter, default.identity) == "killed by SIGTERM"
    assert handled.popen.wait(timeout=20) == 0  # still ours to reap: waitid(WNOWAIT) left it
    assert default.popen.wait(timeout=20) == -signal.SIGTERM
    assert waiter.watching() == set()


def test_pidfd_status_is_exact_for_own_children(workloads: Workloads) -> None:
    with ProcessHandles() as handles:
        waiter = PidfdExitWaiter(handles)
        child = workloads.start("ignore")
        waiter.watch(child.identity)
        child.popen.send_signal(signal.SIGKILL)
        assert wait_exit(waiter, child.identity) == "killed by SIGKILL"


ORPHAN_PARENT = """
import os, signal, sys
pid = os.fork()
if pid == 0:
    signal.pause()
sys.stdout.write(f"{pid}\\n"); sys.stdout.flush()
sys.stdin.read()  # never reaps its child while we look
"""


def test_status_of_someone_elses_child_from_proc_while_zombie(waiter: PidfdExitWaiter) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", ORPHAN_PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        start = start_time(pid)
        assert start is not None
        identity = ProcessIdentity(pid, start)
        assert waiter.watch(identity) is None
        assert waiter.running(identity)
        os.kill(pid, signal.SIGTERM)
        assert wait_exit(waiter, identity) == "killed by SIGTERM"
    finally:
        parent.kill()
        parent.wait(timeout=20)
        for stream in (parent.stdin, parent.stdout):
            if stream is not None:
                stream.close()


def test_running_tells_released_from_exited(workloads: Workloads, waiter: PidfdExitWaiter) -> None:
    releasing = workloads.start("release")
    waiter.watch(releasing.identity)
    os.kill(releasing.identity.pid, signal.SIGTERM)
    releasing.expect("released")
    assert waiter.running(releasing.identity)
    releasing.popen.kill()
    releasing.popen.wait(timeout=20)
    assert not waiter.running(releasing.identity)


def test_watching_a_gone_process_says_so(workloads: Workloads, waiter: PidfdExitWaiter) -> None:
    child = workloads.start("handled")
    identity = child.identity
    child.popen.kill()
    child.popen.wait(timeout=20)
    assert waiter.watch(identity) is SignalResult.GONE
    assert not waiter.running(identity)
    other = workloads.start("handled")
    assert waiter.watch(ProcessIdentity(other.identity.pid, 1)) is SignalResult.IDENTITY_CHANGED


def test_wait_returns_at_the_exit_not_at_the_timeout(workloads: Workloads, waiter: PidfdExitWaiter) -> None:
    child = workloads.start("handled")
    waiter.watch(child.identity)
    os.kill(child.identity.pid, signal.SIGTERM)
    wait_for(lambda: child.popen.poll() is not None, what="the child to exit")
    began = time.monotonic()
    exited: list[tuple[ProcessIdentity, ExitStatus]] = []
    while not exited:
        exited = waiter.wait(30.0)
    assert time.monotonic() - began < 10  # far below the 30 s timeout: woken by the exit itself


def test_a_wakeup_ends_the_wait_at_once_and_a_ring_before_the_wait_is_kept(workloads: Workloads) -> None:
    wake = Wakeup()
    with ProcessHandles() as handles:
        waiter = PidfdExitWaiter(handles, wake=wake)
        child = workloads.start("ignore")
        assert waiter.watch(child.identity) is None
        wake.ring()  # before the wait: kept until the waiter wakes
        done: list[object] = []
        thread = threading.Thread(target=lambda: done.append(waiter.wait(600.0)), daemon=True)
        thread.start()
        wait_for(lambda: done, timeout=20, what="the wait to end on the ring")  # not in 600 s
        assert done == [[]]  # woken, nobody exited
        done.clear()
        thread = threading.Thread(target=lambda: done.append(waiter.wait(600.0)), daemon=True)
        thread.start()
        wait_for(lambda: asleep(thread, in_kernel="poll"), timeout=20, what="the waiter asleep in poll")
        assert not done  # the ring was taken: this wait sleeps
        wake.ring()  # from another thread, during the wait
        wait_for(lambda: done, timeout=20, what="the wait to end on the second ring")
        child.popen.kill()
        assert wait_exit(waiter, child.identity) == "killed by SIGKILL"  # exits still seen
    wake.close()
