"""`systemctl reload tpu-watchdog` as systemd does it: a real SIGHUP to a real `tpu-watchdog run`, mid-drain,
first with a good new file, then with a bad one, then with one that drops the webhook; the notify protocol
on a real datagram socket, a real webhook receiver on loopback.

The drain keeps its deadline through both; the good file's grace waits for the event in progress to end
and then is the next event's; its webhook gets the very next notices; its restart-only change (listen) is
named and not applied; the bad file changes nothing and says why, in the log and in STATUS=; once the
webhook is dropped, it gets nothing more. No log line, STATUS= or /status shows its URL. The daemon runs in
a private PID namespace with its one holder, so it can never signal anything else here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.pidns import needs_unshare, run_driver
from tests.support.webhook_receiver import SECRET_PATH

DRIVER = r"""
import json, os, signal, subprocess, sys, time, urllib.request
from pathlib import Path
from datetime import datetime
from tests.support.ports import reserved_port
from tests.support.sdnotify import NotifySocket
from tests.support.waiting import wait_for
from tests.support.webhook_receiver import WebhookReceiver
from tests.support.workloads import TEST_ALLOW, Child, make_device
from watchdog.fake.server import FakeMetadataServer

tmp = Path(sys.argv[1])
config = tmp / "config.toml"
device = make_device(tmp)
until = NotifySocket(tmp / "notify").until

def status(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as answer:
        return json.loads(answer.read())

def reload(contents):
    config.write_text(contents)
    daemon.send_signal(signal.SIGHUP)
    return until("RELOADING=1"), until("READY=1")

report = {}
def told():
    return [(b["type"], datetime.fromisoformat(b["time"].replace("Z", "+00:00")).timestamp())
            for b in receiver.delivered()]

with FakeMetadataServer(listen="127.0.0.1:0") as fake, WebhookReceiver(statuses=[]) as receiver, \
        reserved_port() as port, reserved_port() as other_port:
    config.write_text(f'listen = "127.0.0.1:{port}"\n[drain]\nmaintenance_grace = 60\n')
    child = Child("report", device)  # says "term" for each SIGTERM, never exits: the drain stays running
    child.wait_ready()
    env = dict(os.environ, NOTIFY_SOCKET=str(tmp / "notify"))
    with open(tmp / "daemon.log", "w") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "watchdog", "run", "--config", str(config), "--device", str(device),
             "--allow-number", TEST_ALLOW,
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
        good = f'listen = "127.0.0.1:{other_port}"\nlog_level = "debug"\n[drain]\nmaintenance_grace = 120\n'
        report["good"] = reload(good + f'[notify]\nwebhooks = ["{receiver.url}"]\n')
        shown = status(port)  # still on the old port: listen needs a restart
        report["after_good"], report["webhooks_shown"] = shown["drain"], shown["webhooks"]
        report["status_text"] = json.dumps(shown, ensure_ascii=False)
        report["bad"] = reload("[drain]\nmaintenance_grace = -1\n")
        report["after_bad"] = status(port)["drain"]
        report["alive_after_reloads"] = daemon.poll() is None
        fake.set("instance/maintenance-event", "NONE")  # the event ends: the drain is cancelled
        until("STATUS=idle")
        fake.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
        until("STATUS=draining")
        second = status(port)["drain"]
        report["next_grace"] = second["deadline"] - second["started"]
        wait_for(lambda: len(told()) == 4, timeout=30, what="the notices since the reload")
        report["dropped"] = reload(good)  # the webhook is gone from the file
        report["dropped_at"] = time.time()
        fake.set("instance/maintenance-event", "NONE")
        until("STATUS=idle")
        fake.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
        until("STATUS=draining")
        fake.set("instance/maintenance-event", "NONE")
        until("STATUS=idle")
        daemon.send_signal(signal.SIGTERM)
        report["daemon_exit"] = daemon.wait(timeout=10)
    child.close()
    report["told"] = told()  # the daemon has stopped: every notice it queued went out or was counted
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
        "READY=1\nSTATUS=reloaded (3 setting(s) changed, notify.webhooks 0 -> 1 URL(s), restart needed for"
        " listen); draining"
    )
    said = log.split("configuration reloaded from ", 1)[1].splitlines()[0]
    assert "after the event in progress: drain.maintenance_grace 60.0 -> 120.0" in said
    assert "applied log_level info -> debug, notify.webhooks [] -> [http://127.0.0.1:" in said
    redacted = "http://" + said.split("[http://", 1)[1].split("]", 1)[0]
    assert redacted.endswith("/…redacted")
    assert [shown["webhook"] for shown in report["webhooks_shown"]] == [redacted]  # as /status shows it
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

    # The webhook got the next notices after the good reload (the event cleared, its drain cancelled,
    # the next event), and none after the reload that dropped it.
    assert [kind for kind, _ in report["told"]] == ["event_cleared", "drain_finished", "event_started",
                                                   "drain_started"]  # fmt: skip
    assert all(at < report["dropped_at"] for _, at in report["told"])
    assert report["dropped"][1].startswith(
        "READY=1\nSTATUS=reloaded (1 setting(s) changed, notify.webhooks 1 -> 0 URL(s), restart needed for"
        " listen); draining"
    )
    assert "applied notify.webhooks [http://127.0.0.1:" in log
    for where, text in [("log", log), ("/status", report["status_text"]), *(
        (f"STATUS= {n}", message) for n in ("good", "bad", "dropped") for message in report[n]
    )]:  # fmt: skip
        assert SECRET_PATH not in text, where
