"""The state directory's lock: one holder at a time, the holder named, released by exit or kill -9."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support.waiting import wait_for
from watchdog.store.lock import StateDirBusyError, StateDirLock
from watchdog.store.statefile import StateDirError


def test_a_second_lock_on_the_same_directory_is_refused_naming_the_holder(tmp_path: Path) -> None:
    first = StateDirLock(str(tmp_path / "state"))
    first.acquire(0.0)
    assert first.held
    with pytest.raises(StateDirBusyError) as refused:
        StateDirLock(str(tmp_path / "state")).acquire(0.2)
    assert f"pid {os.getpid()}" in str(refused.value)
    assert "stop the other one first" in str(refused.value)
    first.release()
    second = StateDirLock(str(tmp_path / "state"))
    second.acquire(0.0)  # free again once released
    second.release()


def test_a_waiting_instance_gets_the_lock_when_the_holder_lets_go(tmp_path: Path) -> None:
    first = StateDirLock(str(tmp_path))
    first.acquire(0.0)
    second = StateDirLock(str(tmp_path))
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: (second.acquire(30.0), got.append(True)))
    waiter.start()
    assert not got
    first.release()
    waiter.join(timeout=10)
    assert got == [True]
    assert second.held
    second.release()


def test_a_stop_ends_the_wait(tmp_path: Path) -> None:
    first = StateDirLock(str(tmp_path))
    first.acquire(0.0)
    stop = threading.Event()
    stop.set()
    with pytest.raises(StateDirBusyError):
        StateDirLock(str(tmp_path)).acquire(300.0, stop)  # returns at once, not in 300 s
    first.release()


def test_the_lock_dies_with_its_holder_even_by_kill_9(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from watchdog.store.lock import StateDirLock; "
         "StateDirLock(sys.argv[1]).acquire(0); print('held', flush=True); time.sleep(600)",
         str(tmp_path)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        lock = StateDirLock(str(tmp_path))
        assert lock.holder_pid() == holder.pid
        with pytest.raises(StateDirBusyError, match=f"pid {holder.pid}"):
            lock.acquire(0.0)
        holder.kill()
        holder.wait(timeout=10)
        wait_for(lambda: lock.holder_pid() is None, what="the kernel to drop the dead holder's lock")
        lock.acquire(0.0)  # no stale lock to clean up
        lock.release()
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.communicate()  # reaps it and closes its pipe


def test_a_read_only_directory_can_still_be_locked(tmp_path: Path) -> None:
    directory = tmp_path / "ro"
    directory.mkdir(mode=0o500)
    lock = StateDirLock(str(directory))
    lock.acquire(0.0)  # flock needs no file of its own: a read-only or full directory is no obstacle
    lock.release()


def test_a_symlink_or_a_file_is_refused_with_what_to_do(tmp_path: Path) -> None:
    target = tmp_path / "real"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(StateDirError, match="is a symlink: never followed"):
        StateDirLock(str(link)).acquire(0.0)
    plain = tmp_path / "file"
    plain.write_text("")
    with pytest.raises(StateDirError, match="is a file, not a directory: remove it") as refused:
        StateDirLock(str(plain)).acquire(0.0)
    assert "permissions" not in str(refused.value)
    with pytest.raises(StateDirError, match=f"{plain} is a file, not a directory; choose another"):
        StateDirLock(str(plain / "state")).acquire(0.0)
