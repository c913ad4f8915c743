"""`tpu-watchdog run` as systemd runs it: a real process, the notify protocol on a real datagram socket
(READY, WATCHDOG pacing, STATUS on a state change, STOPPING), a real drain, a clean and fast stop; and a bad
configuration refused with exit 78.

The daemon runs in a private PID namespace with its one holder, so it can never signal anything else here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.pidns import needs_unshare, run_driver

REPO = Path(__file__).resolve().parents[2]

DRIVER = r"""
import json, os, signal, socket, subprocess, sys, time, urllib.request
from pathlib import Path
from tests.support.sdnotify import NotifySocket
from tests.support.workloads import TEST_ALLOW, Child, make_device
from watchdog.fake.server import FakeMetadataServer

tmp = Path(sys.argv[1])
device = make_device(tmp)
systemd = NotifySocket(tmp / "notify")
until = systemd.until

report = {}
with FakeMetadataServer(listen="127.0.0.1:0") as fake:
    with socket.socket() as probe:  # after the fake has its port, so the two cannot collide
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    child = Child("handled", device)
    child.wait_ready()
    env = dict(os.environ, NOTIFY_SOCKET=str(tmp / "notify"), WATCHDOG_USEC="4000000")
    with open(tmp / "daemon.log", "w") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "watchdog", "run", "--config", str(tmp / "empty.toml"),
             "--metadata-host", fake.address, "--device", str(device), "--allow-number", TEST_ALLOW,
             "--state-dir", str(tmp / "state"), "--listen", f"127.0.0.1:{port}",
             "--metadata-timeout-sec", "2"],
            env=env, stderr=log,
        )
        report["ready"] = until("READY=1")
        until("WATCHDOG=1")
        fake.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
        report["drained_status"] = until("STATUS=drained")
        report["child_exit"] = child.popen.wait(timeout=10)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as answer:
            report["status"] = json.loads(answer.read())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            report["metrics"] = answer.read().decode()
        report["listen_file"] = (tmp / "state" / "listen").read_text()
        asked = time.monotonic()
        daemon.send_signal(signal.SIGTERM)
        report["stopping"] = until("STOPPING=1")
        report["daemon_exit"] = daemon.wait(timeout=10)
        report["stop_seconds"] = time.monotonic() - asked
        report["listen_file_after"] = (tmp / "state" / "listen").exists()
        report["port"] = port
    child.close()
pings = [t for t, m in systemd.messages if m == "WATCHDOG=1"]
report["pings"] = len(pings)
report["max_ping_gap"] = max((b - a for a, b in zip(pings, pings[1:])), default=0.0)
report["log"] = (tmp / "daemon.log").read_text()
print(json.dumps(report))
"""


@needs_unshare
def test_the_daemon_speaks_systemd_drains_and_stops_fast(tmp_path: Path) -> None:
    (tmp_path / "empty.toml").write_text("")
    report = run_driver(DRIVER, tmp_path)
    assert report["ready"].startswith("READY=1\nSTATUS=idle"), report["log"]
    assert report["child_exit"] == 0
    assert report["status"]["state"] == "drained"
    assert report["status"]["last_drain"]["outcome"] == "exited"
    assert 'tpu_watchdog_drains_total{outcome="exited"} 1.0' in report["metrics"]
    assert report["daemon_exit"] == 0
    assert report["listen_file"] == f"127.0.0.1:{report['port']}\n"  # where `status` finds it
    assert report["listen_file_after"] is False  # stopped: nothing listens there now
    assert report["stop_seconds"] < 2.0, report["log"]
    # WATCHDOG_USEC=4 s: a ping every 2 s; a gap of 4 s would have had systemd kill the daemon.
    assert report["pings"] >= 1
    assert report["max_ping_gap"] < 4.0
    assert "SIGTERM to pid" in report["log"]
    assert "drain exited" in report["log"]


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ("[drain]\nmaintenance_grace = -1\n", "drain.maintenance_grace"),
        ("[drain]\nmaintenence_grace = 300\n", "maintenance_grace"),
        ("listen = 9478\n", "listen"),
    ],
)
def test_a_bad_configuration_exits_78_naming_the_key(tmp_path: Path, config: str, named: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(config)
    done = subprocess.run(
        [sys.executable, "-m", "watchdog", "run", "--config", str(path), "--state-dir", str(tmp_path / "s")],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 78, done.stderr
    assert str(path) in done.stderr
    assert named in done.stderr


def test_grace_1e12_exits_78_naming_the_key_and_the_bound(tmp_path: Path) -> None:
    """It was accepted, and the event's first log line failed (year 33715 is out of range): no drain."""
    done = subprocess.run(
        [sys.executable, "-m", "watchdog", "run", "--config", os.devnull, "--grace", "1e12",
         "--state-dir", str(tmp_path / "s")],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 78, done.stderr
    assert (
        "flag --grace: drain.maintenance_grace: 1e+12 is more than the maximum, 86400 s (24 h)" in done.stderr
    )


def test_a_webhook_flag_is_warned_about_once_at_start_and_never_shown(tmp_path: Path) -> None:
    """Every user can read /proc/PID/cmdline. The state dir is a file, so the start ends right after."""
    webhook = "https://hooks.example.com/services/T0/B0/s3cr3t-in-argv"
    (tmp_path / "file").write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "watchdog", "run", "--config", os.devnull, "--webhook", webhook,
         "--state-dir", str(tmp_path / "file" / "state"), "--metadata-host", "127.0.0.1:9"],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
        env={k: v for k, v in os.environ.items() if not k.startswith("TPU_WATCHDOG_")},
    )  # fmt: skip
    assert done.returncode == 73, done.stderr  # the state dir: start-up got past the configuration
    assert done.stderr.count("WARNING notify.webhooks: a --webhook URL is visible to every user") == 1
    assert "TPU_WATCHDOG_NOTIFY_WEBHOOKS" in done.stderr
    assert "s3cr3t" not in done.stderr


STOPPED_WHILE_STARTING = r"""
import atexit, os, signal, sys
from watchdog import cli

atexit.register(lambda: sys.stderr.write("interpreter finalized\\n"))
from watchdog.commands import run as command

load = command.load_config_or_exit
def load_then_stop(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)  # systemctl stop, while the daemon is still starting
    return load(*args, **kwargs)
command.load_config_or_exit = load_then_stop
sys.exit(cli.main(sys.argv[1:]))
"""


def test_a_stop_while_starting_is_a_clean_exit_not_a_death_by_sigterm(tmp_path: Path) -> None:
    """The handler is in place before anything slow, so SIGTERM mid-start-up exits 0 without starting."""
    (tmp_path / "empty.toml").write_text("")
    done = subprocess.run(
        [sys.executable, "-c", STOPPED_WHILE_STARTING, "run", "--config", str(tmp_path / "empty.toml"),
         "--metadata-host", "127.0.0.1:9", "--device", str(tmp_path / "accel0"),
         "--state-dir", str(tmp_path / "state"), "--listen", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "stopped during start-up" in done.stderr
    # Ended without the interpreter's finalization, which tore modules down under the daemon's threads.
    assert "interpreter finalized" not in done.stderr
    assert "started" not in done.stderr.replace("stopped during start-up", "")


DRIVER_TAKEN_PORT = r"""
import json, os, signal, socket, subprocess, sys, time, urllib.request
from pathlib import Path
from tests.support.sdnotify import NotifySocket
from tests.support.waiting import wait_for
from tests.support.workloads import TEST_ALLOW, Child, make_device
from watchdog.fake.server import FakeMetadataServer

tmp = Path(sys.argv[1])
device = make_device(tmp)
until = NotifySocket(tmp / "notify").until

def get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as answer:
            return answer.read().decode()
    except OSError:
        return None

report = {}
with FakeMetadataServer(listen="127.0.0.1:0") as fake:
    taken = socket.socket()  # another process's listener on the daemon's port
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    child = Child("handled", device)
    child.wait_ready()
    env = dict(os.environ, NOTIFY_SOCKET=str(tmp / "notify"))
    with open(tmp / "daemon.log", "w") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "watchdog", "run", "--config", str(tmp / "empty.toml"),
             "--metadata-host", fake.address, "--device", str(device), "--allow-number", TEST_ALLOW,
             "--state-dir", str(tmp / "state"), "--listen", f"127.0.0.1:{port}",
             "--metadata-timeout-sec", "2", "--listen-retry", "0.2"],
            env=env, stderr=log,
        )
        report["ready"] = until("READY=1")
        fake.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
        report["child_exit"] = child.popen.wait(timeout=20)
        report["drained_status"] = until("STATUS=drained")
        report["metrics_while_taken"] = get(port, "/metrics")
        taken.close()  # the port is free: the daemon's next attempt binds it
        report["metrics"] = wait_for(lambda: get(port, "/metrics"), timeout=20, what="/metrics once free")
        report["status_line"] = until(lambda m: "STATUS=" in m and "NOT LISTENING" not in m)
        report["status"] = json.loads(get(port, "/status"))
        daemon.send_signal(signal.SIGTERM)
        report["daemon_exit"] = daemon.wait(timeout=10)
    child.close()
report["log"] = (tmp / "daemon.log").read_text()
print(json.dumps(report))
"""


@needs_unshare
def test_a_taken_listen_port_leaves_the_host_protected_and_is_bound_once_free(tmp_path: Path) -> None:
    """Another process on the metrics port: the daemon still drains on the event, says why it does not
    listen (journal, STATUS=), and serves /metrics and /status once the port is free."""
    (tmp_path / "empty.toml").write_text("")
    report = run_driver(DRIVER_TAKEN_PORT, tmp_path)
    assert "HTTP NOT LISTENING" in report["ready"], report["log"]
    assert "Address already in use" in report["ready"]
    assert report["child_exit"] == 0  # its SIGTERM handler ran
    assert "SIGTERM to pid" in report["log"]
    assert "cannot listen on 127.0.0.1:" in report["log"]
    assert report["metrics_while_taken"] is None
    assert 'tpu_watchdog_drains_total{outcome="exited"} 1.0' in report["metrics"]
    errors = re.search(r'tpu_watchdog_output_errors_total\{output="http"\} (\S+)', report["metrics"])
    assert errors is not None
    assert float(errors.group(1)) >= 1
    assert report["status_line"].startswith("STATUS=drained")
    http = report["status"]["http"]
    assert http["error"] is None, http
    assert http["address"] == f"127.0.0.1:{http['listen'].rpartition(':')[2]}", http
    assert http["failed_binds"] >= 1, http
    assert report["status"]["state"] == "drained"
    assert report["daemon_exit"] == 0


DRIVER_STUCK_LOG = r"""
import fcntl, json, os, signal, socket, subprocess, sys, time, urllib.request
from pathlib import Path
from tests.support.sdnotify import NotifySocket
from tests.support.waiting import wait_for
from tests.support.workloads import TEST_ALLOW, Child, make_device
from watchdog.fake.server import FakeMetadataServer

tmp = Path(sys.argv[1])
device = make_device(tmp)
until = NotifySocket(tmp / "notify").until
read_end, write_end = os.pipe()  # the daemon's stderr: full before it starts, read by nobody until the end
fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
os.set_blocking(write_end, False)
try:
    while True:
        os.write(write_end, b"x" * 4096)
except BlockingIOError:
    pass
os.set_blocking(write_end, True)

def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
        return answer.read().decode()

report = {}
with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
with FakeMetadataServer(listen="127.0.0.1:0") as fake:
    child = Child("handled", device)
    child.wait_ready()
    env = dict(os.environ, NOTIFY_SOCKET=str(tmp / "notify"))
    daemon = subprocess.Popen(
        [sys.executable, "-m", "watchdog", "run", "--config", str(tmp / "empty.toml"),
         "--metadata-host", fake.address, "--device", str(device), "--allow-number", TEST_ALLOW,
         "--state-dir", str(tmp / "state"), "--listen", f"127.0.0.1:{port}", "--log-level", "debug",
         "--metadata-timeout-sec", "2"],
        env=env, stderr=write_end,
    )
    os.close(write_end)
    report["ready"] = until("READY=1")
    fake.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
    report["child_exit"] = child.popen.wait(timeout=20)
    report["drained_status"] = until("STATUS=drained")
    report["metrics"] = metrics(port)
    daemon.send_signal(signal.SIGTERM)
    with os.fdopen(read_end, "rb") as stream:  # the stream moves again: the daemon writes what it held
        report["log"] = stream.read().decode(errors="replace")
    report["daemon_exit"] = daemon.wait(timeout=20)
    child.close()
print(json.dumps(report))
"""


@needs_unshare
def test_a_log_stream_nobody_reads_holds_back_no_signal(tmp_path: Path) -> None:
    """stderr a full pipe from the start (a stalled journal, a log shipper that hangs): the daemon becomes
    ready, the job gets its SIGTERM and the drain ends; the lines come out once the stream moves again."""
    (tmp_path / "empty.toml").write_text("")
    report = run_driver(DRIVER_STUCK_LOG, tmp_path)
    assert report["child_exit"] == 0  # its SIGTERM handler ran
    assert report["drained_status"].startswith("STATUS=drained")
    assert 'tpu_watchdog_drains_total{outcome="exited"} 1.0' in report["metrics"]
    assert "SIGTERM to pid" in report["log"]
    assert report["daemon_exit"] == 0
