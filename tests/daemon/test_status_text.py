"""daemon/status_text.py: the /status JSON in words. Never a data structure, the most important first; a drain
lists its processes with the deadline and the time left; metadata that cannot be heard is said in words."""

from __future__ import annotations

from typing import Any

from watchdog.daemon.status_text import render

DRAINING: dict[str, Any] = {
    "state": "draining",
    "events": [{"source": "maintenance-event", "value": "TERMINATE_ON_HOST_MAINTENANCE", "first_seen": 0.0}],
    "drain": {
        "deadline": 300.0, "time_left": 125.4, "on_timeout": "kill",
        "processes": [
            {"pid": 4242, "name": "python3", "user": "alice", "signals": ["SIGTERM"],
             "sent_after": {"SIGTERM": 0.0}, "end": "still_running"},
            {"pid": 4243, "name": "trainer", "user": "bob", "signals": ["SIGTERM"],
             "sent_after": {"SIGTERM": 0.1}, "end": "exited", "exit_status": 0, "ended_after": 2.5},
        ],
    },
    "holders": [{"pid": 4242, "name": "python3", "devices": ["/dev/accel0"]}],
    "metadata": {
        "instance/maintenance-event": {"value": "TERMINATE_ON_HOST_MAINTENANCE", "last_success": 0.0},
    },
}  # fmt: skip


def test_a_drain_in_words_each_process_the_deadline_and_the_time_left() -> None:
    text = render(DRAINING)
    lines = text.splitlines()
    assert lines[0] == "state:       draining"
    event = "event:       maintenance-event = TERMINATE_ON_HOST_MAINTENANCE (since 1970-01-01T00:00:00Z)"
    assert event in text
    assert "drain:       deadline 1970-01-01T00:05:00Z, 2 min 5 s left, then kill" in text
    assert "processes:   2 in this drain, 1 still running" in text
    [running] = [line for line in lines if " 4242 " in line]
    assert "python3" in running
    assert "SIGTERM +0.00 s" in running
    assert running.endswith("running")
    [gone] = [line for line in lines if " 4243 " in line]
    assert "gone: exited 0 after 2.50 s" in gone
    assert "holders:" not in text  # during a drain its processes say it, not the last scan
    assert "{" not in text  # never a data structure
    assert "'" not in text


def test_after_a_drain_the_last_one_per_process_and_where_to_see_every_drain() -> None:
    status = {
        "state": "idle",
        "recent_drains": [{
            "outcome": "timed_out", "started": "2026-12-02T01:00:00Z", "dry_run": False,
            "processes": [{"pid": 7, "name": "stuck", "user": "root", "signals": ["SIGTERM", "SIGKILL"],
                           "sent_after": {"SIGTERM": 0.0, "SIGKILL": 300.0}, "end": "killed"}],
        }],
        "holders": [],
    }  # fmt: skip
    text = render(status)
    assert "last drain:  timed_out, started 2026-12-02T01:00:00Z" in text
    assert "killed" in text
    assert "it never left on its own" in text
    assert "(every drain: tpu-watchdog history)" in text
    assert "holders:     none at the last scan" in text


def test_metadata_that_cannot_be_heard_is_said_in_words() -> None:
    status = {
        "state": "idle",
        "metadata": {
            "instance/preempted": {"last_error": "connection_refused", "last_success": None, "value": None},
            "instance/upcoming-maintenance": {"mode": "unsupported"},
        },
    }
    text = render(status)
    unheard = "instance/preempted: UNREACHABLE: no good answer since start, last error connection_refused"
    assert unheard in text
    assert "instance/upcoming-maintenance: not on this machine (404)" in text


def test_a_stale_state_file_a_dry_run_and_unwritten_files_are_said() -> None:
    status = {
        "state": "drained", "from_state_file": True, "dry_run": True,
        "state_file": {"persisted": False, "error": "No space left on device"},
        "history_file": {"persisted": False, "error": "Read-only file system"},
        "host": {"tpu_node": "train-a", "worker": "1"},
    }  # fmt: skip
    text = render(status)
    assert text.startswith("state:       drained  (dry run: nothing is sent)\n")
    assert "the daemon is not answering: this is its state file" in text
    assert "state file:  NOT PERSISTED: No space left on device" in text
    assert "history:     NOT WRITTEN: Read-only file system" in text
    assert "host:        tpu_node=train-a worker=1" in text


def test_the_watched_devices_and_the_refused_ones_are_said_and_none_is_loud() -> None:
    status = {
        "state": "idle",
        "devices": [
            {"path": "/dev/vfio/0", "number": "245:0", "type": "char", "class": "vfio", "watched": True,
             "why": "VFIO group 0 of Google PCI devices (vendor 0x1ae0)"},
            {"path": "/dev/vfio/vfio", "number": "10:196", "type": "char", "class": "misc", "watched": False,
             "why": "the VFIO container, which every VFIO user opens, TPU or not"},
        ],
    }  # fmt: skip
    lines = render(status).splitlines()
    assert "devices:     1 TPU device node(s) watched" in lines
    assert (
        "             /dev/vfio/0 245:0 class vfio: VFIO group 0 of Google PCI devices (vendor 0x1ae0)"
        in lines
    )
    assert any(line.endswith("/dev/vfio/vfio 10:196 class misc: NOT WATCHED: the VFIO container, which every "
                             "VFIO user opens, TPU or not") for line in lines)  # fmt: skip
    nothing = render({"state": "idle", "devices": [status["devices"][1]]})
    assert (
        "devices:     NONE: no TPU device node matches devices.patterns: this host protects nothing"
        in nothing
    )
    assert "devices:" not in render({"state": "idle"})  # a state file read back: no devices to speak of
