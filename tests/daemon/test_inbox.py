"""The loop's inbox: a message put by any thread wakes the loop's one poll(2), with or without a drain's
pidfds beside the inbox's eventfd."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading

import pytest

from watchdog.core.process import ProcessIdentity
from watchdog.daemon.inbox import Inbox
from watchdog.host.exits import PidfdExitWaiter
from watchdog.host.procfs import start_time
from watchdog.host.signals import ProcessHandles


def test_a_message_put_from_another_thread_ends_the_wait_and_comes_out_in_order() -> None:
    inbox: Inbox[str] = Inbox()
    threading.Timer(0.05, lambda: (inbox.put("first"), inbox.put("second"))).start()
    inbox.wait(30)  # returns at the put, not after 30 s
    assert inbox.ready()
    assert [inbox.get_nowait(), inbox.get_nowait()] == ["first", "second"]
    with pytest.raises(queue.Empty):
        inbox.get_nowait()


def test_a_ring_before_the_wait_is_kept_and_a_wait_with_nothing_returns_at_its_timeout() -> None:
    inbox: Inbox[str] = Inbox()
    inbox.ring()  # the stop, rung before the loop waits: not lost
    inbox.wait(30)
    assert not inbox.ready()
    inbox.wait(0.01)  # nothing put, nothing rung: the timeout
    assert inbox.empty()


def test_a_drains_exit_and_a_message_share_one_poll() -> None:
    """The loop's wait while a drain runs: the drain's exit waiter polls the inbox's eventfd with the
    pidfds, so either ends it."""
    inbox: Inbox[str] = Inbox()
    handles = ProcessHandles()
    waiter = PidfdExitWaiter(handles, wake=inbox.wakeup)
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        identity = ProcessIdentity(child.pid, start_time(child.pid) or 0)
        assert waiter.watch(identity) is None
        threading.Timer(0.05, inbox.put, args=("answer",)).start()
        assert waiter.wait(30) == []  # woken by the message: no exit
        assert inbox.get_nowait() == "answer"
        assert child.stdin is not None
        child.stdin.close()  # the child exits
        ((exited, _),) = waiter.wait(30)
        assert exited == identity
    finally:
        child.kill()
        child.wait()
        handles.close()
