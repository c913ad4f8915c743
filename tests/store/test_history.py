"""store/history.py: the drain history file, appended crash-safely, bounded, private, loud when full."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.mounts import tmpfs
from tests.support.waiting import wait_for
from watchdog.core.clock import utc_text
from watchdog.store.history import HISTORY_FILE, LOCK_FILE, HistoryFile, load_entries


def entry(n: int, outcome: str | None = "exited", started: float = 1_800_000_000.0) -> dict[str, object]:
    return {"id": f"drain-{n}", "started": utc_text(started + n), "outcome": outcome, "processes": []}


def ids(history: HistoryFile) -> list[object]:
    return [e["id"] for e in history.entries()]


def test_a_drain_written_at_its_start_and_end_is_one_drain_with_its_last_word(tmp_path: Path) -> None:
    history = HistoryFile(str(tmp_path))
    history.append(entry(1, outcome=None))
    history.append(entry(2, outcome=None))
    history.append(entry(1, outcome="timed_out"))
    again = HistoryFile(str(tmp_path))
    assert ids(again) == ["drain-2", "drain-1"]  # the order of the last line
    assert again.find("drain-1") == entry(1, outcome="timed_out")
    assert [e["id"] for e in again.recent(5)] == ["drain-1", "drain-2"]  # newest first
    assert stat.S_IMODE(os.stat(tmp_path / HISTORY_FILE).st_mode) == 0o600


def test_a_torn_last_line_is_skipped_said_once_and_the_next_drain_is_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    history = HistoryFile(str(tmp_path))
    history.append(entry(1))
    with open(tmp_path / HISTORY_FILE, "ab") as handle:
        handle.write(b'{"id": "drain-2", "started": "2027-')  # kill -9 in the middle of a write
    with caplog.at_level(logging.WARNING):
        again = HistoryFile(str(tmp_path))
    assert ids(again) == ["drain-1"]
    assert sum("skipped 1 line(s)" in r.getMessage() for r in caplog.records) == 1
    again.append(entry(3))
    assert [e["id"] for e in load_entries(str(tmp_path / HISTORY_FILE))] == ["drain-1", "drain-3"]


def test_the_history_is_bounded_and_the_newest_is_kept(tmp_path: Path) -> None:
    history = HistoryFile(str(tmp_path), keep=5)
    for n in range(40):
        history.append(entry(n, outcome=None))
        history.append(entry(n))
    lines = (tmp_path / HISTORY_FILE).read_bytes().count(b"\n")
    assert lines <= 5 + 5 // 2 + 1
    assert ids(history)[-1] == "drain-39"
    assert ids(HistoryFile(str(tmp_path), keep=5))[-5:] == [f"drain-{n}" for n in range(35, 40)]
    ours = {HISTORY_FILE, LOCK_FILE}
    assert not [p for p in tmp_path.iterdir() if p.name not in ours]  # no temporary file left
    assert stat.S_IMODE(os.stat(tmp_path / LOCK_FILE).st_mode) == 0o600
    (tmp_path / f".{HISTORY_FILE}.x1y2.tmp").write_bytes(b"half a rewrite")  # a crash mid-rewrite
    HistoryFile(str(tmp_path))
    assert not [p for p in tmp_path.iterdir() if p.name not in ours]  # removed at start


def test_old_drains_go_at_a_rewrite_but_never_the_newest(tmp_path: Path) -> None:
    history = HistoryFile(str(tmp_path), keep=2)
    history.append(entry(1, started=0.0))  # 1970: far older than any bound
    for n in range(2, 6):
        history.append(entry(n))
    assert "drain-1" not in ids(HistoryFile(str(tmp_path), keep=2))
    (tmp_path / "lone").mkdir()
    lone = HistoryFile(str(tmp_path / "lone"), keep=1)
    for _ in range(3):
        lone.append(entry(1, started=0.0))  # the newest is old: kept anyway
    assert ids(HistoryFile(str(tmp_path / "lone"))) == ["drain-1"]


def test_a_symlink_in_its_place_is_never_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("not ours\n")
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / HISTORY_FILE).symlink_to(target)
    history = HistoryFile(str(tmp_path / "state"))
    history.append(entry(1))
    assert target.read_text() == "not ours\n"
    assert ids(HistoryFile(str(tmp_path / "state"))) == ["drain-1"]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "disk") as mountpoint:
        yield mountpoint


def test_a_full_disk_is_loud_never_a_crash_and_nothing_is_lost_once_there_is_room(
    small_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    history = HistoryFile(str(small_disk))
    history.append(entry(1))
    for name, block in (("filler", "4096"), ("crumbs", "1")):  # every last byte
        subprocess.run(
            ["dd", "if=/dev/zero", f"of={small_disk / name}", f"bs={block}"], capture_output=True, check=False
        )
    big = {"notes": ["x" * 8192]}  # more than what is left of the file's last page
    with caplog.at_level(logging.ERROR):
        history.append({**entry(2), **big})
        history.append({**entry(3), **big})
    assert history.write_error is not None
    assert history.unwritten == 2
    assert ids(history) == ["drain-1", "drain-2", "drain-3"]  # in memory, for /status
    assert sum("cannot write" in r.getMessage() for r in caplog.records) == 1  # once per kind of error
    (small_disk / "filler").unlink()
    history.retry()
    assert history.write_error is None
    assert [e["id"] for e in load_entries(str(small_disk / HISTORY_FILE))] == [
        "drain-1",
        "drain-2",
        "drain-3",
    ]


def test_in_the_background_a_hung_disk_holds_up_no_caller_and_nothing_is_lost(tmp_path: Path) -> None:
    """The daemon's history: its loop appends a drain and goes on; a thread of its own writes it."""
    released, calls = threading.Event(), []

    def hanging_fsync(fd: int) -> None:
        calls.append(fd)
        released.wait()

    changes: list[int] = []
    history = HistoryFile(
        str(tmp_path), background=True, fsync=hanging_fsync, changed=lambda: changes.append(1)
    )
    history.append(entry(1, outcome=None))  # returns: the writer thread hangs in its fsync
    wait_for(lambda: calls, what="the writer's fsync, hanging")
    history.append(entry(1, outcome="exited"))  # and again, while the first write still hangs
    history.append(entry(2))
    assert history.find("drain-1") == entry(1, outcome="exited")  # in memory at once
    assert ids(history) == ["drain-1", "drain-2"]
    assert changes == []
    released.set()
    wait_for(lambda: history.unwritten == 0 and len(changes) >= 2, what="every drain written")
    again = HistoryFile(str(tmp_path))
    assert ids(again) == ["drain-1", "drain-2"]
    assert again.find("drain-1") == entry(1, outcome="exited")
