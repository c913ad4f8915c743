"""`systemctl reload tpu-watchdog` as systemd does it: a real SIGHUP to a real `tpu-watchdog run`, mid-drain,
first with a good new file, then with a bad one; the notify protocol on a real datagram socket.

The drain keeps its deadline through both; the good file's grace waits for the event in progress to end
and then is the next event's; its restart-only change (listen) is named and not applied; the bad file
changes nothing and says why, in the log and in STATUS=. The daemon runs in a private PID namespace with
its one holder, so it can never signal anything else here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.pidns import needs_unshare, run_driver

DRIVER = r"""
import json, os, signal, socket, subprocess, sys, time, urllib.request
from pathlib import Path
from tests.support.workloads import Child, make_device
from watchdog.fake.server import FakeMetadataServer

tmp = Path(sys.argv[1])
config = tmp / "config.toml"
device = make_device(tmp)
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind(str(tmp / "notify"))
sock.settimeout(30)

def until(text):
    while True:
        message = sock.recv(4096).decode()
        if text in message:
            return message

def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]

def status(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as answer:
        return json.loads(answer.read())

def reload(contents):
    config.write_text(contents)
    daemon.send_signal(signal.SIGHUP)
    return until("RELOADING=1"), until("READY=1")

report = {}
with FakeMetadataServer(listen="127.0.0.1:0") as fake:
    port, other_port = free_port(), free_port()
    config.write_text(f'listen = "127.0.0.1:{port}"\n[drain]\nmaintenance_grace = 60\n')
    child = Child("report", device)  # says "term" for each SIGTERM, never exits: the drain stays running
    child.wait_ready()
    env = dict(os.environ, NOTIFY_SOCKET=str(tmp / "notify"))
    with open(tmp / "daemon.log", "w") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "watchdog", "run", "--config", str(config), "--device", str(device),
             "--metadata-host", fake.address, "--state-dir", str(tmp / "state"),
             "--metadata-timeout-sec", "2"],
            env=env, stderr=log,
        )
        until("READY=1")
        fake.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
        until("STATUS=draining")
        child.expect("term")
        first = status(port)["drain"]
        report["deadline_before"] = first["deadline"] - first["started"]
        report["good"] = reload(
            f'listen = "127.0.0.1:{other_port}"\nlog_level = "debug"\n[drain]\nmaintenance_grace = 120\n'
        )
        report["after_good"] = status(port)["drain"]  # still on the old port: listen needs a restart
        report["bad"] = reload("[drain]\nmaintenance_grace = -1\n")
        report["after_bad"] = status(port)["drain"]
        report["alive_after_reloads"] = daemon.poll() is None
        fake.set("instance/maintenance-event", "NONE")  # the event ends: the drain is cancelled
        until("STATUS=idle")
        fake.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
        until("STATUS=draining")
        second = status(port)["drain"]
        report["next_grace"] = second["deadline"] - second["started"]
        daemon.send_signal(signal.SIGTERM)
        report["daemon_exit"] = daemon.wait(timeout=10)
    child.close()
report["first"] = first
report["log"] = (tmp / "daemon.log").read_text()
print(json.dumps(report))
"""


@needs_unshare
def test_reload_mid_drain_with_a_good_then_a_bad_file(tmp_path: Path) -> None:
    report = run_driver(DRIVER, tmp_path)
    log = report["log"]
    assert report["alive_after_reloads"], log
    first = report["first"]
    # A drain in progress keeps its deadline through both reloads.
    assert report["deadline_before"] == pytest.approx(60.0, abs=0.01)
    assert report["after_good"]["deadline"] == first["deadline"]
    assert report["after_bad"]["deadline"] == first["deadline"]

    reloading, ready = report["good"]
    assert reloading.startswith("RELOADING=1\nMONOTONIC_USEC=")
    assert ready.startswith(
        "READY=1\nSTATUS=reloaded (2 setting(s) changed, restart needed for listen); draining"
    )
    said = log.split("configuration reloaded from ", 1)[1].splitlines()[0]
    assert "after the event in progress: drain.maintenance_grace 60.0 -> 120.0" in said
    assert "applied log_level info -> debug" in said
    assert said.endswith("needs `systemctl restart tpu-watchdog` (the old value stays): listen")

    reloading, ready = report["bad"]
    assert reloading.startswith("RELOADING=1")
    assert ready.startswith("READY=1\nSTATUS=reload refused (configuration unchanged): ")
    assert "drain.maintenance_grace" in ready
    assert "ERROR reload refused, the configuration in use is unchanged" in log
    assert "-1 is negative" in log

    # Once the event is over, the good file's grace is the next event's; the bad file changed nothing.
    assert "the reloaded drain settings apply now" in log
    assert report["next_grace"] == pytest.approx(120.0, abs=0.01)
    assert report["daemon_exit"] == 0
    assert "Traceback" not in log
