"""The unit under a real systemd manager (systemd-nspawn booting this machine's /usr): every hardening
directive enforced, and the daemon still does its job.

Inside the container: the fake metadata server as a second unit (loopback, private network; a webhook
receiver too, for the reload test), the shipped unit with only ExecStart changed (the venv's binary, test
flags) and a drop-in for what a test needs (WatchdogSec=3, the wedge file removed before each start, the
interpreter made visible if it lives under /root or /home). A device dir holds a mknod'ed node with the
numbers of /dev/full, which nothing in the container holds open: any process holding it is a holder; a node
numbered like /dev/null would make every daemon in the container one.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.container import Container, binds_for_checkout, why_not
from tests.support.units import REPO, unit_text
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

UNIT = "tpu-watchdog.service"
FAKE_UNIT = "tpuwd-fake.service"
FAKE_ADDRESS = "127.0.0.1:8053"  # the container's own loopback: always free
DEVICE_DIR = "/srv/tpu-dev"
WEDGE = "/var/lib/tpu-watchdog/wedge"  # the state dir: the only place the unit may write
HOOK_MARK = "/var/lib/tpu-watchdog/hook-ran"
LOCK_FILE = "/tmp/libtpu_lockfile"
CONFIG = "/etc/tpu-watchdog/config.toml"
# The host's /tmp must stay visible (PrivateTmp=no) for the lock file; a hook runs inside the sandbox.
GOOD_CONFIG = f"""[devices]
extra_paths = ["{LOCK_FILE}"]
allow_numbers = ["1:7"]  # accel0 carries /dev/full's numbers: class mem, never watched unless named
[hooks]
on_event_start = ["/bin/sh", "/run/tpuwd-hook"]
"""
HOOK = f"""echo "$TPU_WATCHDOG_EVENT" > {HOOK_MARK}
"""  # a root-owned script: a shell string (sh -c) is refused
DEV_FULL = os.makedev(1, 7)
STARTED_ID = "98ae34cc9a444eddb7d4c13f76fa4bdd"  # logs.MESSAGE_IDS["daemon_started"]
SIGNAL_SENT_ID = "b64be2df8f894d9ba0b6c773d0a5e800"  # logs.MESSAGE_IDS["signal_sent"]
NOBODY = 65534
SHOWN = ("ActiveState", "SubState", "StatusText", "NRestarts", "Result", "MainPID", "ExecMainStatus")

BIN = Path(sys.executable).parent
# Inside the container: a client for the fake's control API, and a wait for the fake's port.
FAKE_CTL = f"""#!{BIN / "python"}
import socket, sys, time, urllib.request
if sys.argv[1] == "wait":
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", 8053), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
else:
    method, path = sys.argv[1:3]
    body = sys.argv[3].encode() if len(sys.argv) > 3 else None
    request = urllib.request.Request("http://{FAKE_ADDRESS}/_fake/" + path, data=body, method=method)
    urllib.request.urlopen(request, timeout=10).close()
"""
# Inside the container: a webhook receiver on its loopback, one JSON body per line in RECEIVED.
RECEIVER_UNIT = "tpuwd-receiver.service"
RECEIVED = "/run/tpuwd-received.jsonl"
WEBHOOK = "http://127.0.0.1:8054/services/T0NSPAWN/B0NSPAWN/s3cr3t-never-shown"
RECEIVER = f"""#!{BIN / "python"}
import http.server
class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with open("{RECEIVED}", "ab") as out:
            out.write(body + b"\\n")
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
server = http.server.HTTPServer(("127.0.0.1", 8054), Handler)
open("{RECEIVED}", "w").close()  # listening: the test may start
server.serve_forever()
"""
FAKE_SERVICE = f"""[Unit]
Description=Fake GCE metadata server for the unit tests
[Service]
ExecStart={BIN / "tpu-watchdog"} fake-metadata --listen {FAKE_ADDRESS}
ExecStartPost=/run/tpuwd-fake-ctl wait
"""


def drop_in() -> str:
    """Test-only settings: a short watchdog, a fresh start after a wedge, the interpreter made visible."""
    lines = ["[Service]", "WatchdogSec=3", f"ExecStartPre=/bin/rm -f {WEDGE}"]
    hidden = [p for p in {str(REPO), sys.prefix, sys.base_prefix} if p.startswith(("/root", "/home"))]
    if hidden:  # ProtectHome=yes hides them; tmpfs + binds shows only these (the .deb uses /usr)
        lines += ["ProtectHome=tmpfs", "BindReadOnlyPaths=" + " ".join(sorted(hidden))]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def container(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Container]:
    reason = why_not()
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("nspawn")  # ext4 here: device nodes work (not on a nodev tmpfs)
    devices = work / "dev"
    devices.mkdir()
    os.mknod(devices / "accel0", 0o600 | 0o020000, DEV_FULL)
    box = Container(binds_for_checkout(REPO, devices, DEVICE_DIR), work / "console.log")
    try:
        box.write("/run/tpuwd-fake-ctl", FAKE_CTL)
        box.run("chmod", "0755", "/run/tpuwd-fake-ctl")
        box.write("/run/tpuwd-receiver", RECEIVER)
        box.run("chmod", "0755", "/run/tpuwd-receiver")
        box.write("/run/tpuwd-hook", HOOK)
        box.write(f"/run/systemd/system/{FAKE_UNIT}", FAKE_SERVICE)
        args = f"--metadata-host {FAKE_ADDRESS} --device {DEVICE_DIR}/accel* --test-wedge-file {WEDGE}"
        box.write(f"/run/systemd/system/{UNIT}", unit_text(args))
        box.write(f"/run/systemd/system/{UNIT}.d/test.conf", drop_in())
        box.write(CONFIG, GOOD_CONFIG)
        box.run("install", "-m", "0644", "/dev/null", LOCK_FILE)
        box.run("systemctl", "daemon-reload")
        box.run("systemctl", "start", FAKE_UNIT)
        yield box
    finally:
        box.close()


EVENT_ID = re.compile(r"\(id ([^)]+)\)")


def show(box: Container, unit: str = UNIT) -> dict[str, str]:
    out = box.run("systemctl", "show", "-p", ",".join(SHOWN), unit).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def journal(box: Container, *matches: str) -> list[dict[str, object]]:
    """The journal's entries that match (none: journalctl --grep exits 1, an answer like any other)."""
    done = box.run("journalctl", "--no-pager", "-o", "json", *matches, check=False)
    assert done.returncode in (0, 1), done
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def fake(box: Container, *args: str) -> None:
    box.run("/run/tpuwd-fake-ctl", *args)


def reload_with(box: Container, config: str, answer: str = "reloaded") -> str:
    """Write `config`, `systemctl reload`, and return Status: once it starts with `answer`. The reload
    (kill -HUP) may return before the daemon's READY=1, so Status: is waited for, never read at once."""
    box.write(CONFIG, config)
    box.run("systemctl", "reload", UNIT)
    said = lambda: show(box)["StatusText"]  # noqa: E731
    return str(wait_for(lambda: said().startswith(answer) and said(), 20, 0.1, f"Status: {answer}"))


@pytest.fixture
def daemon(container: Container) -> Iterator[Container]:
    """The unit started (systemctl start returns once READY=1 arrives), stopped afterwards."""
    fake(container, "POST", "reset", "{}")
    container.run("systemctl", "reset-failed", UNIT, check=False)
    container.run("systemctl", "start", UNIT)
    try:
        yield container
    finally:
        container.run("systemctl", "stop", UNIT, check=False)


def test_start_returns_when_ready_and_runs(daemon: Container) -> None:
    state = show(daemon)
    assert (state["ActiveState"], state["SubState"], state["NRestarts"]) == ("active", "running", "0")
    assert state["StatusText"].startswith("idle"), state
    mode = daemon.run("stat", "-c", "%a %U", "/var/lib/tpu-watchdog").stdout.split()
    assert mode == ["700", "root"]  # StateDirectoryMode=0700


def test_the_sandbox_costs_no_warning(daemon: Container) -> None:
    """Nothing the daemon reads at start is hidden from it (ProcSubset=pid would hide the boot id, and the
    daemon says so at warning level): this run logs nothing at warning or worse."""
    invocation = daemon.run("systemctl", "show", "-P", "InvocationID", UNIT).stdout.strip()
    assert journal(daemon, f"_SYSTEMD_INVOCATION_ID={invocation}", "MESSAGE_ID=" + STARTED_ID)
    complaints = journal(daemon, f"_SYSTEMD_INVOCATION_ID={invocation}", "--priority=warning")
    assert [entry["MESSAGE"] for entry in complaints] == []


def test_journal_shows_the_structured_fields(daemon: Container) -> None:
    main = show(daemon)["MainPID"]

    def this_daemons() -> dict[str, object] | None:
        """Its daemon_started entry: log lines reach journald from a thread of their own, so the entry
        can come after READY=1, and an earlier daemon's is in the journal too."""
        started = journal(daemon, f"MESSAGE_ID={STARTED_ID}", f"_SYSTEMD_UNIT={UNIT}")
        return next((e for e in reversed(started) if e["_PID"] == main), None)

    last = wait_for(this_daemons, 10, 0.1, "the running daemon's daemon_started entry in the journal")
    assert last["SYSLOG_IDENTIFIER"] == "tpu-watchdog"
    assert last["TPU_WATCHDOG_STATE"] == "idle"
    assert last["_PID"] == show(daemon)["MainPID"]


def start_holder(box: Container, unit: str, path: str) -> str:
    """A process of uid 65534 (not the daemon's) holding `path` open as its stdin; its pid."""
    box.run(
        "systemd-run",
        f"--unit={unit}",
        f"--uid={NOBODY}",
        f"--property=StandardInput=file:{path}",
        "/bin/sleep",
        "infinity",
    )
    pid = show(box, unit)["MainPID"]
    assert pid != "0"
    return pid


def has_stopped(box: Container, unit: str) -> bool:
    return box.run("systemctl", "is-active", unit, check=False).stdout.strip() != "active"


def test_drains_holders_of_another_user_through_the_sandbox(daemon: Container) -> None:
    """CAP_KILL, CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH are enough and the syscall filter lets pidfds
    through: processes of uid 65534 holding the device, or the lock file in the host's /tmp, are found
    and get SIGTERM (the journal names each one's unit); the event's hook runs inside the sandbox and may
    write the state dir."""
    holders = {"tpuwd-holder-device.service": f"{DEVICE_DIR}/accel0", "tpuwd-holder-lock.service": LOCK_FILE}
    pids = {start_holder(daemon, unit, path) for unit, path in holders.items()}
    fake(daemon, "PUT", "v1/instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
    for unit in holders:
        wait_for(functools.partial(has_stopped, daemon, unit), 20, 0.1, f"{unit} to exit")
    wait_for(lambda: show(daemon)["StatusText"].startswith("drained"), 20, 0.1, "STATUS=drained")
    sent = journal(daemon, f"MESSAGE_ID={SIGNAL_SENT_ID}", f"_SYSTEMD_UNIT={UNIT}")
    signalled = {(entry["TPU_WATCHDOG_PID"], entry["TPU_WATCHDOG_SIGNAL"]) for entry in sent}
    assert signalled == {(pid, "SIGTERM") for pid in pids}  # the holders, and nothing else in there
    assert {entry["TPU_WATCHDOG_UNIT"] for entry in sent} == set(holders)  # each named by its unit
    hook = wait_for(lambda: daemon.run("cat", HOOK_MARK, check=False).stdout, 20, 0.1, "the hook's file")
    assert hook.strip() == "maintenance-event=TERMINATE_ON_HOST_MAINTENANCE"


def test_holders_names_the_unit_and_the_scope_of_each_holder(container: Container) -> None:
    """A service (systemd-run --unit) and a scope (systemd-run --scope) holding the device, under a real
    manager: `holders` names each one's unit and slice, read from its cgroup."""
    service, scope = "tpuwd-identity-service.service", "tpuwd-identity-scope.scope"
    path = f"{DEVICE_DIR}/accel0"
    service_pid = start_holder(container, service, path)
    run_scope = f"systemd-run --scope --unit={scope} /bin/sleep infinity < {path} > /dev/null 2>&1 &"
    container.run("/bin/sh", "-c", run_scope)  # the scope runs in the foreground: left in the background
    try:
        active = lambda: not has_stopped(container, scope)  # noqa: E731
        wait_for(active, 20, 0.1, f"{scope} to start")
        scan = [
            str(BIN / "tpu-watchdog"),
            "holders",
            "--device",
            f"{DEVICE_DIR}/accel*",
            "--allow-number",
            "1:7",
        ]
        listed = container.run(*scan, "--json")
        found = {str(entry["pid"]): entry["workload"] for entry in json.loads(listed.stdout)}
        assert found[service_pid] == {
            "kind": "systemd_unit", "unit": service, "slice": "system.slice", "runtime": None,
            "container_id": None, "pod_uid": None, "pod_namespace": None, "pod_name": None,
            "container_name": None,
        }  # fmt: skip
        scoped = [w for pid, w in found.items() if pid != service_pid]
        assert [(w["kind"], w["unit"], w["slice"]) for w in scoped] == [
            ("systemd_unit", scope, "system.slice")
        ]
        table = container.run(*scan).stdout
        assert f"unit {service}" in table, table
        assert f"unit {scope}" in table, table
    finally:
        container.run("systemctl", "stop", service, scope, check=False)


def test_watchdog_kills_and_restarts_a_wedged_daemon(daemon: Container) -> None:
    first = show(daemon)["MainPID"]
    daemon.run("touch", WEDGE)

    def restarted_once() -> dict[str, str]:
        state = show(daemon)
        return state if (state["NRestarts"], state["SubState"]) == ("1", "running") else {}

    restarted = wait_for(restarted_once, 30, 0.1, "a watchdog restart")
    assert restarted["MainPID"] != first
    messages = [str(e["MESSAGE"]) for e in journal(daemon, f"UNIT={UNIT}", "_PID=1")]
    assert any("Watchdog timeout" in m for m in messages), messages[-10:]
    assert any("status=6/ABRT" in m for m in messages), messages[-10:]


def test_reload_rereads_the_file_and_a_bad_one_changes_nothing(daemon: Container) -> None:
    """`systemctl reload` (ExecReload=/bin/kill -HUP $MAINPID): the daemon answers RELOADING=1, then READY=1
    with the outcome in Status:; the same process goes on, a bad file refused with the reason."""
    before = show(daemon)
    try:
        said = reload_with(daemon, GOOD_CONFIG + "[drain]\nmaintenance_grace = 120\n")
        assert said.startswith("reloaded (1 setting(s) changed); idle"), said
        refused = "reload refused (configuration unchanged)"
        assert "maintenance_grace" in reload_with(daemon, "[drain]\nmaintenance_grace = -1\n", refused)
        after = show(daemon)
        assert (after["ActiveState"], after["SubState"]) == ("active", "running")
        assert (after["MainPID"], after["NRestarts"]) == (before["MainPID"], "0")
    finally:
        daemon.write(CONFIG, GOOD_CONFIG)


def test_reload_adds_then_drops_a_webhook_and_never_shows_it(daemon: Container) -> None:
    """A reload that adds a webhook sends it the next event, one that drops it sends it nothing more; the
    journal and Status: never show the URL."""
    invocation = daemon.run("systemctl", "show", "-P", "InvocationID", UNIT).stdout.strip()
    daemon.run("rm", "-f", RECEIVED)
    daemon.run("systemd-run", f"--unit={RECEIVER_UNIT}", "/run/tpuwd-receiver")

    def received() -> list[str]:
        out = daemon.run("cat", RECEIVED, check=False).stdout
        return [json.loads(line)["type"] for line in out.splitlines()]

    def event_ids(said: str) -> set[str]:
        """The event ids of this daemon's journal lines starting with `said` ("event started: ... (id X)")."""
        lines = journal(daemon, f"_SYSTEMD_INVOCATION_ID={invocation}", f"--grep=^{said}")
        return {m.group(1) for e in lines if (m := EVENT_ID.search(str(e["MESSAGE"])))}

    def an_event(number: int) -> None:
        """One maintenance event, started and cleared, told apart from any other by its id (a daemon that
        starts with an event on file from an earlier test clears that one first)."""
        try:
            before = event_ids("event started")
            fake(daemon, "PUT", "v1/instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
            [new] = wait_for(lambda: event_ids("event started") - before, 20, 0.1, f"event {number} seen")
            fake(daemon, "PUT", "v1/instance/maintenance-event", "NONE")
            wait_for(lambda: new in event_ids("event cleared"), 20, 0.1, f"event {number} cleared")
        except AssertionError as failed:  # the daemon's own account of those 20 s
            lines = [str(e["MESSAGE"]) for e in journal(daemon, f"_SYSTEMD_INVOCATION_ID={invocation}")]
            raise AssertionError(f"{failed}; the daemon said:\n" + "\n".join(lines[-40:])) from None

    try:
        wait_for(lambda: daemon.run("test", "-e", RECEIVED, check=False).returncode == 0, 20, 0.1, "receiver")
        said = reload_with(daemon, GOOD_CONFIG + f'[notify]\nwebhooks = ["{WEBHOOK}"]\n')
        assert said.startswith("reloaded (1 setting(s) changed, notify.webhooks 0 -> 1 URL(s)); idle"), said
        an_event(1)
        wait_for(lambda: "event_cleared" in received(), 20, 0.1, "the event's notices")
        said = reload_with(daemon, GOOD_CONFIG)
        assert said.startswith("reloaded (1 setting(s) changed, notify.webhooks 1 -> 0 URL(s)); idle"), said
        an_event(2)
        daemon.run("systemctl", "stop", UNIT)  # gives what was queued its time: nothing more comes now
        assert received() == ["event_started", "drain_started", "drain_finished", "event_cleared"]
        lines = [str(e["MESSAGE"]) for e in journal(daemon, f"_SYSTEMD_INVOCATION_ID={invocation}")]
        assert any("applied notify.webhooks [] -> [http://127.0.0.1:8054/…redacted]" in m for m in lines)
        assert not [m for m in lines if "s3cr3t" in m]
    finally:
        daemon.write(CONFIG, GOOD_CONFIG)
        daemon.run("systemctl", "stop", RECEIVER_UNIT, check=False)


def test_stop_is_clean_and_fast(daemon: Container) -> None:
    start = time.monotonic()
    daemon.run("systemctl", "stop", UNIT)
    took = time.monotonic() - start
    state = show(daemon)
    assert (state["ActiveState"], state["Result"]) == ("inactive", "success")
    assert took < 5, f"systemctl stop took {took:.1f} s"


def test_a_bad_configuration_is_not_restarted(container: Container) -> None:
    """Exit 78 with RestartPreventExitStatus=78: failed at once, not waiting to restart."""
    container.write(CONFIG, "listen = 'not an address'\n")
    try:
        container.run("systemctl", "reset-failed", UNIT, check=False)
        result = container.run("systemctl", "start", UNIT, check=False)
        assert result.returncode != 0
        state = show(container)
        assert (state["ActiveState"], state["SubState"]) == ("failed", "failed")  # not auto-restart
        assert state["ExecMainStatus"] == "78"
    finally:
        container.write(CONFIG, GOOD_CONFIG)
        container.run("systemctl", "reset-failed", UNIT, check=False)
