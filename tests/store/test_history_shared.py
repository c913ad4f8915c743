"""store/history.py shared by two processes: the daemon's history and a drill's line written meanwhile.

Real processes on one state directory: a drill's entry written between two of the daemon's writes survives
the daemon's rotation (a rewrite from memory would drop it), and a lock held by another process delays a
write, then fails it like a full disk (kept in memory, written at the retry), never hangs the daemon.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.store.test_history import entry, ids
from watchdog.store.history import HISTORY_FILE, LOCK_FILE, HistoryFile, load_entries

REPO = Path(__file__).resolve().parents[2]

# A drill's way of writing: a process of its own, a history not loaded, one `write` per drain.
DRILLS = r"""
import sys
from watchdog.core.clock import utc_text
from watchdog.store.history import HistoryFile
state_dir, count, start = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
print("go", flush=True)
for n in range(count):
    drill = {"id": f"drill-{n}", "started": utc_text(start + n / 100), "outcome": "exited",
             "processes": []}
    HistoryFile(state_dir, load=False).write(drill)
"""

# Holds the history's lock until its stdin closes.
HOLDER = r"""
import fcntl, os, sys
fd = os.open(os.path.join(sys.argv[1], sys.argv[2]), os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.read()
"""


def python(code: str, *args: str, **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], cwd=REPO, text=True, **kwargs,  # type: ignore[call-overload]
    )  # fmt: skip


def test_a_drill_written_between_two_daemon_writes_survives_its_rotation(tmp_path: Path) -> None:
    daemon = HistoryFile(str(tmp_path), keep=4)  # rotates past 6 lines
    daemon.append(entry(1))
    assert python(DRILLS, str(tmp_path), "1", "1800000001.5").wait(60) == 0  # after drain-1's start
    for n in range(2, 5):
        daemon.append(entry(n, outcome=None))
        daemon.append(entry(n))
    on_file = [e["id"] for e in load_entries(str(tmp_path / HISTORY_FILE))]
    assert on_file == ["drill-0", "drain-2", "drain-3", "drain-4"], on_file  # by start; the oldest went
    assert (tmp_path / HISTORY_FILE).read_bytes().count(b"\n") == 4  # it was rewritten: one line each
    assert "drill-0" in ids(daemon)  # the daemon's memory (its /status) has it now too


def test_two_writers_at_once_lose_nothing(tmp_path: Path) -> None:
    daemon = HistoryFile(str(tmp_path), keep=40)  # rotates past 60 lines of its own
    drills = python(DRILLS, str(tmp_path), "15", "1800000000.5", stdout=subprocess.PIPE)
    assert drills.stdout is not None
    assert drills.stdout.readline() == "go\n"
    for n in range(25):  # three lines a drain (its start, a retry, its end): 75 lines, rotations
        if n == 20:
            assert drills.wait(60) == 0  # the last rotation comes after every drill was written
        for outcome in (None, None, "exited"):
            daemon.append(entry(n, outcome=outcome))
    drills.stdout.close()
    on_file = {str(e["id"]) for e in load_entries(str(tmp_path / HISTORY_FILE))}
    assert on_file == {f"drain-{n}" for n in range(25)} | {f"drill-{n}" for n in range(15)}


def test_a_lock_held_elsewhere_fails_the_write_for_now_and_the_retry_writes_it(tmp_path: Path) -> None:
    daemon = HistoryFile(str(tmp_path))
    holder = python(HOLDER, str(tmp_path), LOCK_FILE, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "locked\n"
        daemon.append(entry(1))  # waits LOCK_WAIT, then gives up: never hangs the daemon
        assert daemon.write_error is not None
        assert "held by another process" in str(daemon.write_error)
        assert daemon.unwritten == 1
        assert ids(daemon) == ["drain-1"]
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(30)
        holder.stdout.close()
    daemon.retry()
    assert daemon.write_error is None
    assert [e["id"] for e in load_entries(str(tmp_path / HISTORY_FILE))] == ["drain-1"]
