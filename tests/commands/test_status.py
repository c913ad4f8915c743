"""`tpu-watchdog status`: from a running daemon's /status, else from its state file."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.support.daemon_harness import MAINTENANCE, DaemonHarness
from tests.support.waiting import wait_for
from tests.support.workloads import Workloads
from watchdog.commands.status import addresses, render
from watchdog.fake.server import FakeMetadataServer
from watchdog.fake.vm_identity import TpuIdentity
from watchdog.store.address import LISTEN_FILE, remove_listen_address, write_listen_address
from watchdog.surface.httpapi import HttpSurface, RetryingListener

REPO = Path(__file__).resolve().parents[2]


def status(tmp_path: Path, listen: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "empty.toml").write_text("")
    return subprocess.run(
        [sys.executable, "-m", "watchdog", "status", "--config", str(tmp_path / "empty.toml"),
         "--listen", listen, "--state-dir", str(tmp_path / "state"), *args],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip


def test_status_of_a_running_daemon(fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path) -> None:
    workloads.start("handled")
    with DaemonHarness(tmp_path / "state", fake, workloads) as harness:
        http = HttpSurface("127.0.0.1:0", harness.daemon.view)
        http.start()
        try:
            fake.set(MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE")
            harness.wait_state("drained")
            shown = status(tmp_path, http.address)
            raw = status(tmp_path, http.address, "--json")
        finally:
            http.stop()
    assert shown.returncode == 0, shown.stderr
    assert "state:       drained" in shown.stdout
    assert "maintenance-event = TERMINATE_ON_HOST_MAINTENANCE" in shown.stdout
    assert "last drain:  exited" in shown.stdout
    data = json.loads(raw.stdout)
    assert data["state"] == "drained"
    assert data["events"][0]["source"] == "maintenance-event"


def no_data_structure(text: str) -> None:
    """Words only: no dict, list or repr of one (the 3 a.m. reader's complaint)."""
    for mark in ("{", "}", "[", "'", "None"):
        assert mark not in text, f"{mark!r} in:\n{text}"


def test_status_during_and_after_a_drain_names_each_process(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path
) -> None:
    stubborn = workloads.start("gate")  # says "term" on SIGTERM, exits when the test lets it
    quick = workloads.start("handled")
    with DaemonHarness(tmp_path / "state", fake, workloads, maintenance_grace=60.0) as harness:
        http = HttpSurface("127.0.0.1:0", harness.daemon.view)
        http.start()
        try:
            fake.set(MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE")
            stubborn.expect("term")
            wait_for(lambda: not quick.alive(), what="the handled job to exit")
            wait_for(lambda: "gone" in status(tmp_path, http.address).stdout, what="status to show the exit")
            during = status(tmp_path, http.address).stdout
            stubborn.open_gate()
            harness.wait_state("drained")
            after = status(tmp_path, http.address).stdout
            raw = json.loads(status(tmp_path, http.address, "--json").stdout)
        finally:
            http.stop()
    assert "state:       draining" in during
    assert "left, then kill" in during  # the deadline and the time left
    assert "processes:   2 in this drain, 1 still running" in during
    lines = {int(line.split()[0]): line for line in during.splitlines() if line.strip()[:1].isdigit()}
    assert "SIGTERM +" in lines[stubborn.popen.pid]
    assert lines[stubborn.popen.pid].rstrip().endswith("running")
    assert re.search(r"gone: exited( 0)? after", lines[quick.popen.pid])  # its status, when it can be read
    assert "python" in lines[quick.popen.pid]  # the process name
    no_data_structure(during)
    assert "last drain:  exited" in after
    assert "2 processes: 2 exited on SIGTERM" in after
    assert str(stubborn.popen.pid) in after
    assert str(quick.popen.pid) in after
    no_data_structure(after)
    assert raw["recent_drains"][0]["outcome"] == "exited"
    assert {p["pid"] for p in raw["recent_drains"][0]["processes"]} == {stubborn.popen.pid, quick.popen.pid}


def test_status_falls_back_to_the_state_file(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path
) -> None:
    workloads.start("handled")
    with DaemonHarness(tmp_path / "state", fake, workloads) as harness:
        fake.set(MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE")
        harness.wait_state("drained")
    shown = status(tmp_path, "127.0.0.1:1")  # nobody listens there
    assert shown.returncode == 3, shown.stderr
    said = "no answer from the daemon on 127.0.0.1:1: nothing listens there (connection refused)"
    assert said in shown.stderr
    assert "`systemctl status tpu-watchdog`" in shown.stderr
    assert "urlopen" not in shown.stderr
    assert "Errno" not in shown.stderr
    assert "TERMINATE_ON_HOST_MAINTENANCE" in shown.stdout


def test_status_from_the_state_file_mid_drain_names_who_was_signalled(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path
) -> None:
    child = workloads.start("report")
    with DaemonHarness(tmp_path / "state", fake, workloads, maintenance_grace=60.0):
        fake.set(MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE")
        child.expect("term")
    shown = status(tmp_path, "127.0.0.1:1")  # stopped mid-drain: only its files are left
    assert shown.returncode == 3, shown.stderr
    assert "the daemon is not answering: this is its state file" in shown.stdout
    (line,) = [line for line in shown.stdout.splitlines() if line.split()[:1] == [str(child.popen.pid)]]
    assert "SIGTERM +" in line
    assert line.rstrip().endswith("running")
    no_data_structure(shown.stdout)


def test_status_without_daemon_or_state_is_exit_1(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()  # the daemon's state dir, before it ever ran
    shown = status(tmp_path, "127.0.0.1:1")
    assert shown.returncode == 1
    assert "no usable state file" in shown.stderr
    assert "`systemctl status tpu-watchdog`" in shown.stderr
    assert "Errno" not in shown.stderr


def test_a_state_dir_that_does_not_exist_is_named_as_such(tmp_path: Path) -> None:
    """A mistyped --state-dir once read as a daemon that never ran ("no usable state file")."""
    shown = status(tmp_path, "127.0.0.1:1")
    assert shown.returncode == 1
    assert f"no state directory {tmp_path / 'state'} either" in shown.stderr
    assert "point --state-dir" in shown.stderr
    assert "no usable state file" not in shown.stderr


def test_status_shows_each_holders_sigterm_and_the_slice(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path
) -> None:
    ignoring = workloads.start("ignore")
    fake.set_identity(TpuIdentity("v5litepod-16", "train-a", worker=1, hosts=4))
    with DaemonHarness(tmp_path / "state", fake, workloads, host_info=True) as harness:
        wait_for(lambda: bool(harness.daemon.view.holders), what="the first holder scan")
        wait_for(lambda: harness.daemon.view.identity.tpu_node == "train-a", what="the identity learned")
        http = HttpSurface("127.0.0.1:0", harness.daemon.view)
        http.start()
        try:
            shown = status(tmp_path, http.address)
            raw = json.loads(status(tmp_path, http.address, "--json").stdout)
        finally:
            http.stop()
    assert f"pid {ignoring.popen.pid} " in shown.stdout
    assert "(SIGTERM ignored)" in shown.stdout
    assert "tpu_node=train-a" in shown.stdout
    assert [h["sigterm"] for h in raw["holders"]] == ["ignored"]
    assert raw["host"]["worker_id"] == "1"


def test_metadata_that_cannot_be_heard_is_said_in_words() -> None:
    shown = render(
        {
            "state": "idle",
            "metadata": {
                "instance/maintenance-event": {"mode": "hanging", "value": None, "last_success": None,
                                               "last_error": "connection_refused"},
                "instance/preempted": {"mode": "hanging", "value": "FALSE", "last_success": 1.8e9,
                                       "last_error": "timeout"},
                "instance/upcoming-maintenance": {"mode": "unsupported", "value": None, "last_success": None,
                                                  "last_error": "http_404"},
            },
        }
    )  # fmt: skip
    assert (
        "instance/maintenance-event: UNREACHABLE: no good answer since start, last error connection_refused"
    ) in shown
    assert "instance/preempted = FALSE (last answer 2027-01-15T08:00:00Z; now failing: timeout" in shown
    assert "instance/upcoming-maintenance: not on this machine (404)" in shown
    no_data_structure(shown)


def write_state(tmp_path: Path, content: str) -> None:
    (tmp_path / "state").mkdir(exist_ok=True)
    (tmp_path / "state" / "state.json").write_text(content)


def test_a_state_file_deadline_past_year_9999_is_shown_not_raised(tmp_path: Path) -> None:
    """A deadline of year 33715 (an extreme grace) once made `status` end in a traceback."""
    write_state(tmp_path, json.dumps({
        "events": [{"source": "maintenance-event", "value": "TERMINATE_ON_HOST_MAINTENANCE",
                    "first_seen": 1.8e9}],
        "drain": {"started_at": 1.8e9, "deadline_at": 1.0e12, "on_timeout": "kill"},
        "signals": [],
    }))  # fmt: skip
    shown = status(tmp_path, "127.0.0.1:1")
    assert shown.returncode == 3, shown.stderr
    assert "drain:       deadline 9999-12-31T23:59:59Z" in shown.stdout
    assert "Traceback" not in shown.stderr


@pytest.mark.parametrize(
    "content",
    [
        "[]",  # JSON, but not an object
        '{"drain": {"deadline_at": "soon"}}',
        '{"drain": {}, "signals": 5}',
        '{"events": [1, 2], "last_outcome": "exited"}',
        '{"drain": {"deadline_at": 1e400}}',  # inf
    ],
)
def test_a_state_file_of_an_unknown_shape_is_a_line_never_a_traceback(tmp_path: Path, content: str) -> None:
    write_state(tmp_path, content)
    shown = status(tmp_path, "127.0.0.1:1")
    assert shown.returncode in (1, 3), shown.stderr
    assert "Traceback" not in shown.stderr
    assert shown.stdout or "state file" in shown.stderr, shown.stderr


class Answering:
    """A daemon's HTTP surface answering /status with what a test sets (served over real HTTP)."""

    def __init__(self, answer: dict[str, Any]) -> None:
        self.registry = CollectorRegistry()
        self.answer = answer

    def status(self) -> dict[str, Any]:
        return self.answer

    def liveness(self) -> tuple[bool, str]:
        return True, "ok"

    health = readiness = liveness


@pytest.mark.parametrize(
    ("answer", "code", "said"),
    [
        (
            {"state": "draining", "drain": {"deadline": 1.0e12, "time_left": 1.0e12}},
            0,
            "9999-12-31T23:59:59Z",
        ),
        ({"state": "idle", "events": ["not an event"]}, 1, "cannot put the daemon's answer in words"),
        ({"state": "drained", "recent_drains": [{"outcome": "exited", "processes": 3}]}, 1, "cannot put"),
    ],
)
def test_a_daemon_answer_of_an_unknown_shape_is_a_line_never_a_traceback(
    tmp_path: Path, answer: dict[str, Any], code: int, said: str
) -> None:
    http = HttpSurface("127.0.0.1:0", Answering(answer))
    http.start()
    try:
        shown = status(tmp_path, http.address)
    finally:
        http.stop()
    assert shown.returncode == code, shown.stderr
    assert said in shown.stdout + shown.stderr
    assert "Traceback" not in shown.stderr


def test_a_listener_that_bound_late_is_said() -> None:
    shown = render({"state": "idle", "http": {"address": "127.0.0.1:9478", "error": None, "failed_binds": 4}})
    assert "http:        listening on 127.0.0.1:9478 after 4 failed bind(s)" in shown
    assert "http:" not in render({"state": "idle", "http": {"address": "127.0.0.1:9478", "failed_binds": 0}})


def test_status_finds_the_daemon_through_its_state_dir_after_listen_was_edited(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path
) -> None:
    """`listen` edited in the file, the daemon not yet restarted: status asks where the running daemon
    said it listens (STATE_DIR/listen), not the new address; an explicit --listen is asked alone."""
    edited = tmp_path / "edited.toml"
    edited.write_text('listen = "127.0.0.1:1"\n')  # nobody listens there
    argv = [sys.executable, "-m", "watchdog", "status", "--config", str(edited),
            "--state-dir", str(tmp_path / "state"), "--json"]  # fmt: skip
    with DaemonHarness(tmp_path / "state", fake, workloads) as harness:
        http = RetryingListener("127.0.0.1:0", harness.daemon.view, harness.daemon.http_attempted)
        http.start()
        try:
            found = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, cwd=REPO)
            flag = subprocess.run(
                [*argv, "--listen", "127.0.0.1:1"], capture_output=True, text=True, timeout=60, check=False
            )
        finally:
            http.close()
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["state"] == "idle"
    assert flag.returncode == 3, flag.stderr  # the state file only
    assert "no answer from the daemon on 127.0.0.1:1: nothing listens there" in flag.stderr


def test_a_daemon_that_cannot_bind_leaves_no_address_to_ask(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    write_listen_address(str(state), "127.0.0.1:4242")
    assert addresses("127.0.0.1:9478", False, str(state)) == ["127.0.0.1:4242", "127.0.0.1:9478"]
    assert addresses("127.0.0.1:9478", True, str(state)) == ["127.0.0.1:9478"]  # --listen: that one only
    remove_listen_address(str(state))
    assert addresses("127.0.0.1:9478", False, str(state)) == ["127.0.0.1:9478"]
    (state / LISTEN_FILE).write_text("not an address\n")
    assert addresses("127.0.0.1:9478", False, str(state)) == ["127.0.0.1:9478"]
