"""A state disk that hangs (a stuck fsync, or stuck writes) in the middle of an event: the loop goes on
hearing the metadata server and acting on what it hears. A really stuck disk is not available here: the
state store's fsync is injected and blocks until the test ends, as fsync(2) on a hung device would, or its
writes block, as a rename does while ext4's journal cannot commit. Everything else is real: the
daemon, the fake metadata server over loopback HTTP, the files, the holder and its signals."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.daemon_harness import MAINTENANCE, PREEMPTED, DaemonHarness
from tests.support.workloads import Workloads
from watchdog.daemon.loop import STOP_DISK_WAIT
from watchdog.fake.server import FakeMetadataServer
from watchdog.store.records import SavedState
from watchdog.store.statefile import StateStore


class HangingDisk:
    """fsync as usual until `hang()`; from then on every fsync blocks until the test is over."""

    def __init__(self) -> None:
        self.hung = threading.Event()
        self.released = threading.Event()
        self.calls_while_hung = 0

    def fsync(self, fd: int) -> None:
        if self.hung.is_set():
            self.calls_while_hung += 1
            self.released.wait()

    def hang(self) -> None:
        self.hung.set()


class HangingWrites(StateStore):
    """A state store whose every write blocks, from `hang()` until `release()`."""

    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        self.hung, self.released = threading.Event(), threading.Event()
        self.writes_while_hung = 0

    def hang(self) -> None:
        self.hung.set()

    def release(self) -> None:
        self.released.set()

    def _write(
        self, state: SavedState, written: Callable[[], None] | None = None, durable: bool = True
    ) -> None:
        if self.hung.is_set():
            self.writes_while_hung += 1
            self.released.wait()
        super()._write(state, written, durable)


@pytest.fixture
def disk() -> Iterator[HangingDisk]:
    hanging = HangingDisk()
    yield hanging
    hanging.released.set()


def test_a_preemption_during_a_drain_on_a_hung_disk_still_brings_the_sigkill_forward(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path, disk: HangingDisk
) -> None:
    """Maintenance (grace 30 s) drains a job that stays after its SIGTERM; the disk hangs; a preemption
    (grace 2 s) must bring its SIGKILL forward. A loop that fsyncs its own state writes would hang in the
    first one and never hear the preemption: the SIGKILL would come at the 30 s deadline."""
    stubborn = workloads.start("report")  # says "term" and stays
    store = StateStore(str(state_dir), fsync=disk.fsync)
    with DaemonHarness(state_dir, fake, workloads, store=store, maintenance_grace=30.0, preemption_grace=2.0):
        disk.hang()
        fake.set(MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE")
        stubborn.expect("term")
        fake.set(PREEMPTED, "TRUE")
        assert stubborn.popen.wait(timeout=10) == -signal.SIGKILL
        assert disk.calls_while_hung > 0, "the disk hung before the drain's writes"


def test_a_drain_whose_state_writes_hang_still_signals_and_still_hears_a_preemption(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    """The same, with the writes themselves stuck: a loop that wrote its state in its own thread would hang
    in the maintenance drain's first write, so it would never hear the preemption, and the SIGKILL would come
    at the 30 s deadline. The SIGTERM goes out once its write-ahead has waited its bound (0.5 s)."""
    stubborn = workloads.start("report")
    store = HangingWrites(str(state_dir))
    with DaemonHarness(state_dir, fake, workloads, store=store, maintenance_grace=30.0, preemption_grace=2.0):
        try:
            store.hang()
            fake.set(MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE")
            stubborn.expect("term")
            fake.set(PREEMPTED, "TRUE")
            assert stubborn.popen.wait(timeout=10) == -signal.SIGKILL
            assert store.writes_while_hung > 0, "the disk hung before the drain's writes"
        finally:
            store.release()  # the writer's thread may end


def test_a_stop_waits_for_the_history_s_last_write_and_says_when_the_disk_holds_it(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path, disk: HangingDisk,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """The history is written in a thread of its own, which dies with the process: a stop that did not wait
    for it would lose the end of a drain that had just ended. Here the disk hangs, so the wait runs out: the
    stop says so, and still ends. The state file's wait and the history's share one deadline: a stuck disk
    holds the stop back once, not once per file."""
    workloads.start("handled")
    store = StateStore(str(state_dir), fsync=disk.fsync)
    with caplog.at_level(logging.WARNING):
        with DaemonHarness(state_dir, fake, workloads, store=store) as harness:
            history = harness.daemon.recorder.history
            settled, waits = history.settled, list[float]()
            history.settled = lambda timeout: waits.append(timeout) or settled(timeout)  # type: ignore[method-assign]
            disk.hang()
            fake.set(MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE")
            harness.wait_metric("tpu_watchdog_drains_total", 1, outcome="exited")
            # The state file's last write at the stop hangs too, as the history's: it takes its wait in full.
            harness.daemon.runner.writer.flush = disk.released.wait  # type: ignore[method-assign]
        assert not harness.thread.is_alive()
    assert "stopping with the state file's last writes not done" in caplog.text
    assert "stopping with the history's last writes not done" in caplog.text
    assert len(waits) == 1
    assert waits[0] < STOP_DISK_WAIT / 2  # the state file's wait took the rest of the one second
