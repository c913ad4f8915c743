"""A drain's state-file writes off the signal path: a stuck disk holds no signal back for long.

A really stuck disk (a hung network block device, a dying SSD) is not available here, nor a file system
made slow on purpose: the state store's fsync is injected instead, and it blocks until the test ends, as
fsync(2) on such a disk would. Everything else is real: the files, the rename, the child and its SIGKILL."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.test_runner import order, runner_for
from tests.support.waiting import wait_for
from tests.support.workloads import Workloads
from watchdog.core.drain_record import Outcome
from watchdog.core.process import ProcessIdentity
from watchdog.daemon.writeahead import StateWriter
from watchdog.store.records import Intent
from watchdog.store.statefile import StateStore


class StuckDisk:
    """An fsync that never returns until the test is over."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.calls = 0

    def fsync(self, fd: int) -> None:
        self.calls += 1
        self.released.wait()


@pytest.fixture
def stuck() -> Iterator[StuckDisk]:
    disk = StuckDisk()
    yield disk
    disk.released.set()  # the writer threads finish their writes and end


def test_a_stuck_disk_delays_the_sigkill_less_than_a_second(
    workloads: Workloads, state_dir: Path, stuck: StuckDisk
) -> None:
    stubborn = workloads.start("ignore")
    runner, done = runner_for(workloads, state_dir, StateStore(str(state_dir), fsync=stuck.fsync))
    runner.start(order(1.0))
    record = done.get(timeout=30)
    assert record is not None
    assert record.outcome is Outcome.TIMED_OUT, record.summary()
    assert stubborn.popen.wait(timeout=10) == -signal.SIGKILL
    assert stuck.calls > 0, "the disk was stuck from the first write on"
    (kill,) = record.processes[stubborn.identity].sent(signal.SIGKILL)
    assert kill.at is not None
    assert kill.at - record.deadline < 1.0


def test_a_wave_goes_once_its_file_is_in_place_or_when_the_wait_is_over(
    state_dir: Path, stuck: StuckDisk
) -> None:
    store = StateStore(str(state_dir), fsync=stuck.fsync)
    writer = StateWriter(store, changed=lambda: None)
    first, second, third = ProcessIdentity(100, 1), ProcessIdentity(200, 2), ProcessIdentity(300, 3)
    assert writer.intents([Intent(first, signal.SIGTERM, "train")], wait=30)  # renamed in: its fsync hangs
    assert writer.intents([Intent(second, signal.SIGTERM, "train")], wait=30)  # never behind that fsync
    wait_for(lambda: stuck.calls > 0, what="the fsync, in a thread of its own")
    on_file = json.loads(Path(store.path).read_text())
    assert [s["pid"] for s in on_file["signals"]] == [first.pid, second.pid]
    # The loop's own write, stuck in its fsync, holds the store: the next wave waits only so long.
    threading.Thread(
        target=store.record_intents, args=([Intent(third, signal.SIGTERM, "x")],), daemon=True
    ).start()
    wait_for(lambda: stuck.calls > 1, what="the loop's write, stuck")
    assert not writer.intents([Intent(third, signal.SIGKILL, "train")], wait=0.2)
    assert not writer.flush(0.1)


def test_a_wave_whose_intents_are_on_file_goes_at_once_even_behind_a_stuck_write(
    state_dir: Path, stuck: StuckDisk
) -> None:
    store = StateStore(str(state_dir), fsync=stuck.fsync)
    writer = StateWriter(store, changed=lambda: None)
    first, other = ProcessIdentity(100, 1), ProcessIdentity(200, 2)
    # A first wave's intents go with the drain's own state, written by the loop; that write is stuck in its
    # fsync and holds the store, and the writer's thread waits behind it with what an earlier wave did.
    in_place = threading.Event()
    loop_write = threading.Thread(
        target=store.record_intents,
        args=([Intent(first, signal.SIGTERM, "train")], in_place.set),
        daemon=True,
    )
    loop_write.start()
    assert in_place.wait(10)
    wait_for(lambda: stuck.calls > 0, what="the loop's write, in place, stuck in its fsync")
    writer.sents([(other, signal.SIGTERM, "sent")])  # queued behind the stuck write
    assert writer.intents([Intent(first, signal.SIGTERM, "train")], wait=0.2)  # on file already: no wait
    assert not writer.flush(0.1)  # the writer's thread is still stuck behind the loop's write
