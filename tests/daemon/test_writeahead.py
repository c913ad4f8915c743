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
from watchdog.store.records import ExitRecord, Intent, SavedState
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
    _, done = runner_for(workloads, state_dir, StateStore(str(state_dir), fsync=stuck.fsync))
    done.start(order(1.0))
    record = done.get(timeout=30)
    assert record is not None
    assert record.outcome is Outcome.TIMED_OUT, record
    assert stubborn.popen.wait(timeout=10) == -signal.SIGKILL
    assert stuck.calls > 0, "the disk was stuck from the first write on"
    (kill,) = record.processes[stubborn.identity].sent(signal.SIGKILL)
    assert kill.at is not None
    assert kill.at - record.deadline < 1.0


def test_a_wave_is_written_once_its_file_is_in_place_never_behind_an_fsync(
    state_dir: Path, stuck: StuckDisk
) -> None:
    store = StateStore(str(state_dir), fsync=stuck.fsync)
    writer = StateWriter(store, changed=lambda: None)
    first, second, third = ProcessIdentity(100, 1), ProcessIdentity(200, 2), ProcessIdentity(300, 3)
    one = writer.intents([Intent(first, signal.SIGTERM, "train")])
    wait_for(lambda: writer.written(one), what="the first wave's file in place (its fsync hangs)")
    two = writer.intents([Intent(second, signal.SIGTERM, "train")])
    wait_for(lambda: writer.written(two), what="the second wave's, never behind that fsync")
    wait_for(lambda: stuck.calls > 0, what="the fsync, in a thread of its own")
    on_file = json.loads(Path(store.path).read_text())
    assert [s["pid"] for s in on_file["signals"]] == [first.pid, second.pid]
    # The loop's own write, stuck in its fsync, holds the store: the next wave's write waits behind it
    # (its drain holds the wave for WRITE_AHEAD_WAIT at most: test_a_stuck_disk_delays_the_sigkill...).
    threading.Thread(
        target=store.record_intents, args=([Intent(third, signal.SIGTERM, "x")],), daemon=True
    ).start()
    wait_for(lambda: stuck.calls > 1, what="the loop's write, stuck")
    three = writer.intents([Intent(third, signal.SIGKILL, "train")])
    assert not writer.flush(0.2)
    assert not writer.written(three)


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
    assert writer.intents([Intent(first, signal.SIGTERM, "train")]) is None  # on file already: no wait
    assert not writer.flush(0.1)  # the writer's thread is still stuck behind the loop's write


class BusyWriter:
    """Holds the writer's thread in an earlier write until `free()`: what is queued after it waits."""

    def __init__(self, writer: StateWriter) -> None:
        self.busy, self.freed = threading.Event(), threading.Event()
        writer.save(self._earlier)
        assert self.busy.wait(10)

    def _earlier(self, state: SavedState) -> SavedState:
        self.busy.set()
        self.freed.wait(30)
        return state

    def free(self) -> None:
        self.freed.set()


def test_a_first_wave_waits_for_its_drains_save_and_writes_nothing_more(state_dir: Path) -> None:
    store = StateStore(str(state_dir), fsync=lambda fd: None)
    writer = StateWriter(store, changed=lambda: None)
    more: list[object] = []
    record_intents = store.record_intents

    def counted(*args: object, **kwargs: object) -> None:
        more.append(args)
        record_intents(*args, **kwargs)  # type: ignore[arg-type]

    store.record_intents = counted  # type: ignore[method-assign]
    first = ProcessIdentity(100, 1)
    intent = Intent(first, signal.SIGTERM, "train")
    # The writer's thread is busy with an earlier write; the loop then queues its drain's save, which
    # carries the first wave's intent, and the drain asks for that intent before the save is written.
    busy = BusyWriter(writer)
    change = store.lifecycle_change((), None, None, on_timeout=store.state.on_timeout, intents=[intent])
    save = writer.save(change, [intent])
    wave = writer.intents([intent])
    assert wave == save, "the wave waits for the save that carries its intent"
    assert not writer.written(wave)
    busy.free()
    wait_for(lambda: writer.written(wave), what="the save carrying the wave's intent")
    assert store.state.find(first, signal.SIGTERM) is not None
    assert writer.flush(10)
    assert more == [], "the wave wrote its intent again after the save that carried it"


def test_a_failed_save_does_not_hold_back_the_wave_it_carried(state_dir: Path) -> None:
    store = StateStore(str(state_dir), fsync=lambda fd: None)
    told: list[int] = []
    writer = StateWriter(store, changed=lambda: told.append(1))
    intent = Intent(ProcessIdentity(100, 1), signal.SIGTERM, "train")

    def broken(state: SavedState) -> SavedState:
        raise OSError("no space left on device")

    busy = BusyWriter(writer)
    save = writer.save(broken, [intent])
    wave = writer.intents([intent])
    assert wave == save
    busy.free()
    wait_for(lambda: writer.written(wave), what="the failed save, done with")
    assert writer.flush(10)
    assert len(told) >= 2, "the loop hears of the failed write too (a held wave goes)"


def test_ends_that_come_while_the_writer_is_busy_go_in_one_write(state_dir: Path) -> None:
    """A burst of exits (a thousand processes leaving within a second) is not a write per batch."""
    store = StateStore(str(state_dir), fsync=lambda fd: None)
    writer = StateWriter(store, changed=lambda: None)
    writes: list[int] = []
    record_exits = store.record_exits

    def counted(exits: list[ExitRecord], durable: bool = True) -> None:
        writes.append(len(exits))
        record_exits(exits, durable)

    store.record_exits = counted  # type: ignore[method-assign]
    busy = BusyWriter(writer)
    first, second = (ExitRecord(ProcessIdentity(pid, 1), "exited", 10.0 + pid) for pid in (100, 200))
    writer.exits([first])
    writer.exits([second])  # its batch is still queued: it joins it
    busy.free()
    assert writer.flush(10)
    assert writes == [2]
    assert {e.identity.pid for e in store.state.exits} == {100, 200}
