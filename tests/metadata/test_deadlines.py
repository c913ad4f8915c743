"""One deadline thread for all of a transport's requests: runs what is due, never what was cancelled."""

from __future__ import annotations

import threading

from tests.support.waiting import wait_for
from tests.support.wakeups import asleep, switches, wakeups
from watchdog.metadata.deadlines import Deadlines


def _threads_named(name: str) -> int:
    return sum(1 for t in threading.enumerate() if t.name == name)


def test_a_due_deadline_runs_its_action() -> None:
    deadlines = Deadlines(name="test-deadlines-due")
    fired = threading.Event()
    try:
        deadlines.after(0.01, fired.set)
        assert fired.wait(5)
        assert deadlines.pending == 0
    finally:
        deadlines.close()


def test_a_cancelled_deadline_never_runs_and_a_later_one_still_does() -> None:
    deadlines = Deadlines(name="test-deadlines-cancel")
    cancelled, later = threading.Event(), threading.Event()
    try:
        token = deadlines.after(0.05, cancelled.set)
        deadlines.cancel(token)
        deadlines.after(0.1, later.set)  # due after the cancelled one: had it run, it would be set by now
        assert later.wait(5)
        assert not cancelled.is_set()
    finally:
        deadlines.close()


def test_many_requests_share_one_thread_and_cancelled_entries_do_not_pile_up() -> None:
    name = "test-deadlines-many"
    deadlines = Deadlines(name=name)
    try:
        for _ in range(1000):  # a request each: scheduled, then its body arrived in time
            deadlines.cancel(deadlines.after(60.0, lambda: None))
        assert _threads_named(name) == 1
        assert deadlines.pending == 0
        assert len(deadlines._heap) <= 8  # rebuilt as cancelled entries outnumber the live ones
    finally:
        deadlines.close()
    assert _threads_named(name) == 0


def test_a_failing_action_does_not_stop_the_others() -> None:
    deadlines = Deadlines(name="test-deadlines-fail")
    fired = threading.Event()

    def boom() -> None:
        raise RuntimeError("bug in an action")

    try:
        deadlines.after(0.0, boom)
        deadlines.after(0.02, fired.set)
        assert fired.wait(5)
    finally:
        deadlines.close()


def test_after_close_nothing_runs() -> None:
    deadlines = Deadlines(name="test-deadlines-closed")
    fired = threading.Event()
    deadlines.after(0.05, fired.set)
    deadlines.close()
    deadlines.after(0.0, fired.set)
    assert not fired.wait(0.3)  # a negative check: nothing may happen within the time it would have taken


def test_a_later_deadline_does_not_wake_the_thread_and_an_earlier_one_does() -> None:
    """A hanging GET's body deadline is pushed behind the others (each is a read timeout away): the thread
    sleeps on until the earliest; one due sooner than that wakes it, and runs on time."""
    deadlines = Deadlines(name="test-deadlines-wakeups")
    fired = threading.Event()
    try:
        deadlines.after(60.0, lambda: None)  # starts the thread: it sleeps 60 s
        thread = deadlines._thread
        assert thread is not None
        wait_for(lambda: asleep(thread), what="the deadline thread asleep")
        before = switches(thread)
        for seconds in range(61, 71):
            deadlines.cancel(deadlines.after(float(seconds), lambda: None))
        assert wakeups(thread, over=0.3) == 0
        assert switches(thread) == before
        deadlines.after(0.05, fired.set)
        assert fired.wait(5)
    finally:
        deadlines.close()
