"""store/coalesced.py: a job for a thread of its own, never twice at once, once more when asked meanwhile."""

from __future__ import annotations

import threading

from tests.support.waiting import wait_for
from watchdog.store.coalesced import Coalesced


def test_asked_while_it_runs_it_runs_once_more_then_its_thread_ends() -> None:
    gate, runs = threading.Event(), []

    def job() -> None:
        runs.append(threading.current_thread().name)
        gate.wait()

    coalesced = Coalesced(job, "test-coalesced", "the test job")
    coalesced.soon()
    wait_for(lambda: runs, what="the first run")
    for _ in range(5):
        coalesced.soon()  # while the first run waits: one more run, not five
    gate.set()
    wait_for(lambda: len(runs) == 2, what="the second run")
    wait_for(lambda: "test-coalesced" not in {t.name for t in threading.enumerate()}, what="no thread")
    assert runs == ["test-coalesced", "test-coalesced"]


def test_a_job_that_raises_runs_again_at_the_next_ask() -> None:
    runs: list[int] = []

    def job() -> None:
        runs.append(1)
        if len(runs) == 1:
            raise OSError("disk")

    coalesced = Coalesced(job, "test-coalesced-2", "the test job")
    coalesced.soon()
    wait_for(lambda: "test-coalesced-2" not in {t.name for t in threading.enumerate()}, what="no thread")
    coalesced.soon()
    wait_for(lambda: len(runs) == 2, what="the run after the failure")


def test_settled_waits_for_the_run_asked_for_and_says_when_it_could_not() -> None:
    gate, runs = threading.Event(), []

    def job() -> None:
        gate.wait()
        runs.append(1)

    coalesced = Coalesced(job, "test-coalesced-3", "the test job")
    assert coalesced.settled(0.0)  # nothing asked: nothing to wait for
    coalesced.soon()
    assert not coalesced.settled(0.05)  # held at the gate: it cannot be done
    gate.set()
    assert coalesced.settled(10.0)
    assert runs == [1]
