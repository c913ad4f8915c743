"""End to end with a real client: the daemon, the fake metadata server, and a real JAX + Orbax trainer
(examples/jax_orbax_trainer.py, on CPU) holding a device node. TERMINATE_ON_HOST_MAINTENANCE -> the trainer
saves a checkpoint at a step that is not a multiple of its save interval and exits 0; the daemon reports the
drain as exited, with the time it took.

Runs in a private PID namespace: the daemon there can only see (and signal) the trainer.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAVE_INTERVAL = 1000

DRIVER = r"""
import json, os, socket, subprocess, sys, time, urllib.request
from pathlib import Path
from tests.support.workloads import TEST_ALLOW, make_device
from watchdog.fake.server import FakeMetadataServer

tmp, repo, interval = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
device = make_device(tmp)

def wait(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)

def get(url):
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.loads(answer.read())

with FakeMetadataServer(listen="127.0.0.1:0") as fake:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    trainer = subprocess.Popen(
        [sys.executable, str(repo / "examples" / "jax_orbax_trainer.py"),
         "--checkpoint-dir", str(tmp / "ckpt"), "--hold", str(device), "--save-interval", interval,
         "--ready", str(tmp / "ready"), "--report", str(tmp / "report.json")],
        stdout=open(tmp / "trainer.out", "w"), stderr=subprocess.STDOUT,
    )
    daemon = subprocess.Popen(
        [sys.executable, "-m", "watchdog", "run", "--config", str(tmp / "empty.toml"),
         "--metadata-host", fake.address, "--device", str(device), "--allow-number", TEST_ALLOW,
         "--state-dir", str(tmp / "state"),
         "--listen", f"127.0.0.1:{port}", "--metadata-timeout-sec", "5"],
        stderr=open(tmp / "daemon.log", "w"),
    )
    wait(lambda: (tmp / "ready").exists(), 120, "the trainer to run 5 steps")
    def daemon_sees_holder():
        try:
            status = get(f"http://127.0.0.1:{port}/status")
        except OSError:
            return False
        return len(status["metadata"]) == 3
    wait(daemon_sees_holder, 30, "the daemon to be up")
    fake.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
    code = trainer.wait(timeout=120)
    wait(lambda: get(f"http://127.0.0.1:{port}/status")["state"] == "drained", 30, "the drain to end")
    status = get(f"http://127.0.0.1:{port}/status")
    daemon.terminate()
    daemon.wait(timeout=10)
print(json.dumps({
    "trainer_exit": code,
    "report": json.loads((tmp / "report.json").read_text()),
    "status": status,
    "trainer": (tmp / "trainer.out").read_text()[-2000:],
    "log": (tmp / "daemon.log").read_text()[-4000:],
}))
"""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("jax") is None or importlib.util.find_spec("orbax") is None,
        reason="jax and orbax-checkpoint are not installed (make test installs them: the e2e extra)",
    ),
    pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)"),
]


def test_a_real_jax_orbax_trainer_saves_on_maintenance_and_exits_0(tmp_path: Path) -> None:
    (tmp_path / "empty.toml").write_text("")
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", DRIVER, str(tmp_path), str(REPO),
         str(SAVE_INTERVAL)],
        capture_output=True, text=True, timeout=300, check=False, cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["trainer_exit"] == 0, result["trainer"]
    report = result["report"]
    assert report["outcome"] == "preempted", result["trainer"]
    step = report["step"]
    assert step % SAVE_INTERVAL != 0  # an unscheduled checkpoint, saved because of the SIGTERM
    assert step in report["saved_steps"]
    last = result["status"]["last_drain"]
    assert last["outcome"] == "exited", result["log"]
    assert last["duration"] > 0  # the time it took is reported
    assert "drain exited, started" in result["log"]
