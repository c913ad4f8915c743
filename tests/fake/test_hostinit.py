"""The init of a simulated host (watchdog/fake/hostinit.py), as PID 1 of a real PID namespace, with stand-ins
for the job and the daemon: the job is started first, the daemon once the job holds the device; each fact is
one JSON line; a job that never holds the device is said; closing stdin stops the daemon and ends the host."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.waiting import wait_for
from tests.support.workloads import UniqueDevice
from watchdog.fake.hosts import UNSHARE, child_env

# Holds the device, then exits 3 once the go file exists (the test's cue; polling is the stand-in's own way).
JOB = r"""
import os, sys, time
fd = os.open(sys.argv[1], os.O_PATH)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.01)
sys.exit(3)
"""
DAEMON = (
    "import signal, sys; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); print('up', flush=True); "
    "signal.pause()"
)

pytestmark = pytest.mark.skipif(
    shutil.which("unshare") is None or os.geteuid() != 0, reason="needs unshare and root (a PID namespace)"
)


def start(tmp_path: Path, device: Path, job: list[str]) -> subprocess.Popen[str]:
    spec = {"job": job, "daemon": [sys.executable, "-c", DAEMON], "device": str(device),
            "job_log": str(tmp_path / "job.log"), "daemon_log": str(tmp_path / "daemon.log")}  # fmt: skip
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    return subprocess.Popen(
        [*UNSHARE, sys.executable, "-m", "watchdog.fake.hostinit", str(tmp_path / "spec.json")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env(),
    )  # fmt: skip


def next_fact(init: subprocess.Popen[str]) -> dict[str, Any]:
    assert init.stdout is not None
    line = init.stdout.readline()
    assert line, "the init ended"
    fact: dict[str, Any] = json.loads(line)
    return fact


def stop(init: subprocess.Popen[str]) -> list[dict[str, Any]]:
    assert init.stdin is not None
    assert init.stdout is not None
    init.stdin.close()
    rest = [json.loads(line) for line in init.stdout]
    assert init.wait(timeout=30) == 0
    init.stdout.close()
    return rest


def test_the_daemon_starts_once_the_job_holds_and_the_job_exit_is_told(tmp_path: Path) -> None:
    with UniqueDevice(tmp_path) as device:
        go = tmp_path / "go"
        init = start(tmp_path, device.path, [sys.executable, "-c", JOB, str(device.path), str(go)])
        facts = [next_fact(init) for _ in range(3)]
        assert [(f.get("started"), f.get("holding")) for f in facts] == [("job", None), (None, "job"),
                                                                          ("daemon", None)]  # fmt: skip
        assert facts[0]["pid"] == facts[1]["pid"] == 2  # its namespace's first child (the init is 1)
        go.touch()
        exited = next_fact(init)
        assert (exited["exited"], exited["code"]) == ("job", 3)
        assert exited["at"] >= facts[2]["at"]
        log = tmp_path / "daemon.log"
        wait_for(lambda: log.read_text().startswith("up"), 20, what="the stand-in daemon")
        [daemon] = stop(init)
        assert (daemon["exited"], daemon["code"]) == ("daemon", 0)  # SIGTERM, as a daemon is stopped


def test_a_job_that_never_holds_the_device_is_said(tmp_path: Path) -> None:
    with UniqueDevice(tmp_path) as device:
        init = start(tmp_path, device.path, [sys.executable, "-c", "raise SystemExit(1)"])
        facts = [next_fact(init) for _ in range(4)]  # job started and exited, the error, daemon started
        kinds = {next(k for k in ("started", "exited", "error") if k in f) for f in facts}
        assert kinds == {"started", "exited", "error"}
        assert any(f.get("exited") == "job" and f.get("code") == 1 for f in facts)
        assert any("never held" in f.get("error", "") for f in facts)
        stop(init)
