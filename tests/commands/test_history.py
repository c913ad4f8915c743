"""`tpu-watchdog history`: the history file read with no daemon running, in words or as JSON, newest first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from watchdog.core.drain_record import DrainRecord
from watchdog.store.drain_entry import open_entry
from watchdog.store.history import HISTORY_FILE, HistoryFile

REPO = Path(__file__).resolve().parents[2]
START = 1_800_000_000.0


def history(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "empty.toml").write_text("")
    return subprocess.run(
        [sys.executable, "-m", "watchdog", "history", "--config", str(tmp_path / "empty.toml"),
         "--state-dir", str(tmp_path / "state"), *args],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip


def drains(tmp_path: Path, n: int) -> None:
    (tmp_path / "state").mkdir()
    book = HistoryFile(str(tmp_path / "state"))
    for i in range(n):
        opened = DrainRecord.opened(
            f"drain-{i}", START + i * 3600, START + i * 3600 + 300, "kill", False,
            event_key="instance/preempted", event_value="TRUE",
        )  # fmt: skip
        book.append({**open_entry(opened, {}), "outcome": "exited", "dry_run": i % 2 == 1})


def test_json_is_a_list_newest_first_and_limit_keeps_the_newest(tmp_path: Path) -> None:
    drains(tmp_path, 4)
    shown = history(tmp_path, "--json", "--limit", "3")
    assert shown.returncode == 0, shown.stderr
    listed = json.loads(shown.stdout)
    assert [d["id"] for d in listed] == ["drain-3", "drain-2", "drain-1"]
    assert listed[0]["dry_run"] is True
    assert listed[0]["event"] == {"key": "instance/preempted", "value": "TRUE"}


def test_words_one_block_per_drain(tmp_path: Path) -> None:
    drains(tmp_path, 2)
    shown = history(tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.index("drain drain-1: exited") < shown.stdout.index("drain drain-0: exited")
    assert "(dry run)" in shown.stdout.splitlines()[0]
    assert "{" not in shown.stdout


def test_no_history_yet_is_said_and_is_no_error(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()  # the daemon's state dir, before its first drain
    shown = history(tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "no drain yet" in shown.stdout
    assert json.loads(history(tmp_path, "--json").stdout) == []


def test_a_state_dir_that_does_not_exist_is_an_error_not_an_empty_history(tmp_path: Path) -> None:
    for args in ((), ("--json",)):
        shown = history(tmp_path, *args)
        assert shown.returncode == 1, shown.stdout
        assert shown.stdout == ""
        assert f"no state directory {tmp_path / 'state'}" in shown.stderr
        assert "point --state-dir" in shown.stderr


def test_a_bad_limit_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    shown = history(tmp_path, "--limit", "0")
    assert shown.returncode == 2
    assert "--limit" in shown.stderr
    assert "give 1 or more" in shown.stderr


def test_an_unreadable_history_is_exit_1_with_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "state" / HISTORY_FILE).mkdir(parents=True)  # not a file
    shown = history(tmp_path)
    assert shown.returncode == 1
    assert "cannot read the drain history" in shown.stderr
    assert "--state-dir" in shown.stderr


def test_a_torn_line_is_noted_and_the_rest_shown(tmp_path: Path) -> None:
    drains(tmp_path, 1)
    with open(tmp_path / "state" / HISTORY_FILE, "ab") as handle:
        handle.write(b'{"id": "drain-9", "sta')
    shown = history(tmp_path)
    assert shown.returncode == 0
    assert "drain drain-0" in shown.stdout
    assert "skipped 1 line(s)" in shown.stderr
