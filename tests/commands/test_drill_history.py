"""A real drill is a drain of the history: appended to STATE_DIR/history.jsonl and shown by `history`; a dry
run is a report and is not recorded; a history that cannot be written costs one line, not the verdict."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.drilling import REPO, drill, needs_unshare
from tests.support.mounts import tmpfs
from watchdog.exitcodes import EXIT_DRILL_DRY_RUN, EXIT_LOST
from watchdog.store.history import HISTORY_FILE

pytestmark = needs_unshare


def history(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "watchdog", "history", "--config", str(tmp_path / "none.toml"),
         "--state-dir", str(tmp_path / "state"), *args],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip


def test_a_drill_is_in_the_history_with_each_process_and_how_it_ended(tmp_path: Path) -> None:
    done = drill(tmp_path, "handled,ignore", "--grace", "1")
    assert done.returncode == EXIT_LOST, done.stdout + done.stderr
    shown = history(tmp_path, "--json")
    assert shown.returncode == 0, shown.stderr
    [entry] = json.loads(shown.stdout)
    assert entry["id"].startswith("drill-")
    assert f"recorded in the drain history as {entry['id']}" in done.stdout
    assert entry["event"] == {"key": "drill", "value": "rehearsal"}
    assert (entry["dry_run"], entry["outcome"], entry["on_timeout"]) == (False, "timed_out", "kill")
    assert entry["host"] == {}  # a drill does not ask the metadata server who this host is
    by_end: dict[str, dict[str, Any]] = {p["end"]: p for p in entry["processes"]}
    assert sorted(by_end) == ["exited", "killed"], entry["processes"]
    assert by_end["exited"]["signals"] == ["SIGTERM"]
    assert by_end["killed"]["signals"] == ["SIGTERM", "SIGKILL"]
    assert (by_end["exited"]["sigterm"], by_end["killed"]["sigterm"]) == ("caught", "ignored")
    words = history(tmp_path).stdout
    assert f"● drain {entry['id']}: timed_out  drill = rehearsal" in words, words


def test_a_dry_run_is_a_report_and_is_not_recorded(tmp_path: Path) -> None:
    done = drill(tmp_path, "handled", "--grace", "3600", "--dry-run")
    assert done.returncode == EXIT_DRILL_DRY_RUN, done.stdout + done.stderr
    assert not (tmp_path / "state" / HISTORY_FILE).exists()
    assert "recorded" not in done.stdout + done.stderr


def test_a_history_that_cannot_be_written_leaves_the_verdict_and_says_so_once(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir"
    done = drill(tmp_path, "default", "--grace", "5", state_dir=missing)
    assert done.returncode == EXIT_LOST, done.stdout + done.stderr  # as if recorded
    assert "DID NOT HANDLE SIGTERM" in done.stdout
    [said] = [line for line in done.stderr.splitlines() if "not recorded" in line]
    why = f"{missing} does not exist (the daemon makes it; --state-dir names another)"
    assert said == f"drill not recorded in the drain history: {why}"
    assert not missing.exists()  # never made by a drill


def test_a_read_only_state_dir_leaves_the_verdict_and_says_so(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "ro", "ro") as state:
        done = drill(tmp_path, "handled", "--grace", "20", state_dir=state)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "exited in time" in done.stdout
    assert f"drill not recorded in the drain history: {state / HISTORY_FILE}: Read-only file system" in (
        done.stderr
    ), done.stderr
