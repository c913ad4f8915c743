"""The drain history survives the daemon: a clean restart mid-drain, a reboot mid-drain, a drain whose event
cleared while the daemon was down. Real daemons, real holders, real signals; `history` read as a user would,
from another process with no daemon running. (kill -9 at random points: tests/system/test_crash_restart.py
checks the history of every seed.)"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.daemon_harness import MAINTENANCE, DaemonHarness
from tests.support.waiting import wait_for
from tests.support.workloads import Workloads
from watchdog.core.lifecycle import ActiveDrain, Event
from watchdog.fake.server import FakeMetadataServer
from watchdog.store.history import HISTORY_FILE, load_entries
from watchdog.store.statefile import StateStore

REPO = Path(__file__).resolve().parents[2]
TERMINATE = "TERMINATE_ON_HOST_MAINTENANCE"


def history(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (state_dir.parent / "empty.toml").write_text("")
    return subprocess.run(
        [sys.executable, "-m", "watchdog", "history", "--config", str(state_dir.parent / "empty.toml"),
         "--state-dir", str(state_dir), *args],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip


def test_a_drain_cut_by_a_clean_restart_is_one_drain_in_the_history(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path
) -> None:
    child = workloads.start("report")  # never exits on SIGTERM: the deadline's SIGKILL ends it
    state_dir = tmp_path / "state"
    with DaemonHarness(state_dir, fake, workloads, maintenance_grace=6.0) as harness:
        fake.set(MAINTENANCE, TERMINATE)
        child.expect("term")
        wait_for(lambda: harness.daemon.recorder.history.entries(), what="the drain's opening entry")
        drain_id = harness.daemon.lifecycle.drain.drain_id  # type: ignore[union-attr]
    opened = load_entries(str(state_dir / HISTORY_FILE))
    assert [(e["id"], e["outcome"]) for e in opened] == [(drain_id, None)]  # on disk before the restart
    during = history(state_dir)
    assert during.returncode == 0, during.stderr
    assert f"drain {drain_id}: in progress" in during.stdout  # on file: the next start resumes it
    assert "recorded when the drain ends" in during.stdout
    with DaemonHarness(state_dir, fake, workloads, maintenance_grace=6.0) as again:
        live = wait_for(
            lambda: (again.daemon.view.status()["drain"] or {}).get("processes"), what="the resumed drain"
        )
        assert isinstance(live[0]["sent_after"]["SIGTERM"], float)  # the first run's, from the state file
        assert child.popen.wait(timeout=15) == -signal.SIGKILL
        again.wait_state("timed_out")
    shown = history(state_dir, "--json")
    assert shown.returncode == 0, shown.stderr
    drains = json.loads(shown.stdout)
    assert [d["id"] for d in drains] == [drain_id]
    drain = drains[0]
    assert drain["outcome"] == "timed_out"
    assert drain["event"] == {"key": "instance/maintenance-event", "value": TERMINATE}
    assert drain["dry_run"] is False
    assert all(drain[when].endswith("Z") for when in ("started", "deadline", "ended"))
    (proc,) = drain["processes"]
    assert proc["pid"] == child.popen.pid
    assert proc["signals"] == ["SIGTERM", "SIGKILL"]
    assert proc["end"] == "killed"
    assert proc["user"] == "root"
    assert 0 <= proc["sent_after"]["SIGTERM"] < 2.0  # sent by the first run: its time is from the state file
    assert 5.0 <= proc["sent_after"]["SIGKILL"] <= 8.0  # the deadline, 6 s after the start
    text = history(state_dir).stdout
    assert f"drain {drain_id}: timed_out" in text
    assert "1 process: 1 killed at the deadline" in text
    assert f"{child.popen.pid}" in text
    assert "SIGTERM +" in text
    assert "SIGKILL +" in text
    assert "{" not in text  # words, never a data structure
    assert "None" not in text


def test_a_drain_the_host_rebooted_through_is_in_the_history_as_interrupted(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path
) -> None:
    fake.set(MAINTENANCE, "NONE")  # after the reboot the maintenance is over
    state_dir = tmp_path / "state"
    before = StateStore(str(state_dir), boot_id="a-boot-before-this-one")
    started = time.time() - 600
    event = Event("ev-old", "maintenance-event", TERMINATE, started)
    before.save_lifecycle([event], ActiveDrain(["ev-old"], started, started + 300), None, on_timeout="kill")
    child = workloads.start("handled")
    before.record_intent(child.identity, signal.SIGTERM, name="trainer")
    before.record_sent(child.identity, signal.SIGTERM, "sent")
    with DaemonHarness(state_dir, fake, workloads) as harness:
        assert harness.state == "idle"
    drains = json.loads(history(state_dir, "--json").stdout)
    assert [(d["outcome"], d["event"]["value"]) for d in drains] == [("interrupted", TERMINATE)]
    (proc,) = drains[0]["processes"]
    assert (proc["name"], proc["signals"], proc["end"]) == ("trainer", ["SIGTERM"], "unknown")
    assert "host restarted" in proc["detail"]
    assert child.alive()  # nothing was signalled for a drain of another boot


def test_a_drain_whose_event_cleared_while_the_daemon_was_down_is_ended_in_the_history(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path
) -> None:
    fake.set(MAINTENANCE, "NONE")
    state_dir = tmp_path / "state"
    store = StateStore(str(state_dir))
    child = workloads.start("report")
    started = time.time() - 5
    store.save_lifecycle([], ActiveDrain(["ev-gone"], started, started + 300), None, on_timeout="kill")
    store.record_intent(child.identity, signal.SIGTERM, name="python3")
    store.record_sent(child.identity, signal.SIGTERM, "sent")
    with DaemonHarness(state_dir, fake, workloads):
        pass
    drains = json.loads(history(state_dir, "--json").stdout)
    assert [d["outcome"] for d in drains] == ["cancelled"]
    (proc,) = drains[0]["processes"]
    assert (proc["pid"], proc["end"]) == (child.popen.pid, "still_running")  # it ignored SIGTERM, and lives
