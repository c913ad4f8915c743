"""`tpu-watchdog status`: from a running daemon's /status, else from its state file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.daemon_harness import MAINTENANCE, DaemonHarness
from tests.support.waiting import wait_for
from tests.support.workloads import Workloads
from watchdog.fake.identity import TpuIdentity
from watchdog.fake.server import FakeMetadataServer
from watchdog.surface.httpapi import HttpSurface

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
    assert "state:     drained" in shown.stdout
    assert "maintenance-event = TERMINATE_ON_HOST_MAINTENANCE" in shown.stdout
    assert "last drain: exited" in shown.stdout
    data = json.loads(raw.stdout)
    assert data["state"] == "drained"
    assert data["events"][0]["source"] == "maintenance-event"


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


def test_status_without_daemon_or_state_is_exit_1(tmp_path: Path) -> None:
    shown = status(tmp_path, "127.0.0.1:1")
    assert shown.returncode == 1
    assert "no usable state file" in shown.stderr
    assert "`systemctl status tpu-watchdog`" in shown.stderr
    assert "Errno" not in shown.stderr


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
