"""`tpu-watchdog run --log-format json` through the things that used to read badly (metadata errors of
every kind, a 404, a drain that times out, the event clearing): every line on stderr is one JSON object
with Cloud Logging's fields, and what it says is one fact in words (no library reprs, each key named once,
times in UTC with a Z, readable event ids). The soak checker still reads the lines it joins on.

The daemon and its holder run in a private PID namespace (`unshare`), so the drain can signal nothing the
test did not start.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench.soak_facts import parse_daemon_log
from tests.support.crash_scenario import namespace_command
from tests.support.daemon_harness import MAINTENANCE, PREEMPTED, UPCOMING
from tests.support.waiting import wait_for
from tests.support.workloads import TEST_ALLOW, Workloads
from watchdog.fake.faults import Fault
from watchdog.fake.server import FakeMetadataServer

REPO = Path(__file__).resolve().parents[2]
SEVERITIES = {"DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL", "ALERT", "EMERGENCY"}
RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
REPRS = ("Pool(", "Caused by", "Max retries", "object at 0x", "NewConnectionError", 'Error("', "Error('")
EPOCH = re.compile(r"(?<![\d.])1[789]\d{8}(\.\d+)?(?![\d])")  # a raw Unix time in words
KEYS = ("instance/maintenance-event", "instance/preempted", "instance/upcoming-maintenance")
HOLDER = "import os, signal, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); os.open(sys.argv[1], 0); " \
    "open(sys.argv[2], 'w').close(); signal.pause()"  # fmt: skip
pytestmark = pytest.mark.slow


def run_daemon(tmp_path: Path, fake: FakeMetadataServer, device: Path) -> subprocess.Popen[bytes]:
    ready = tmp_path / "holder-ready"
    (tmp_path / "empty.toml").write_text("")
    daemon = [
        sys.executable, "-m", "watchdog", "run", "--config", str(tmp_path / "empty.toml"),
        "--log-format", "json", "--log-level", "debug", "--metadata-host", fake.address,
        "--device", str(device), "--allow-number", TEST_ALLOW, "--grace", "2",
        "--state-dir", str(tmp_path / "state"),
        "--listen", "127.0.0.1:0",
    ]  # fmt: skip
    script = (
        f'{sys.executable} -c "{HOLDER}" {device} {ready} & '
        f"for i in $(seq 400); do [ -e {ready} ] && break; sleep 0.05; done; exec {' '.join(daemon)}"
    )
    with open(tmp_path / "daemon.log", "wb") as log:
        return subprocess.Popen(
            [*namespace_command(), "sh", "-c", script],
            stderr=log, stdout=subprocess.DEVNULL, cwd=REPO,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO)},
        )  # fmt: skip


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the daemon, PID 1 of the namespace and unshare's only child (unshare ignores SIGTERM)."""
    children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
    for child in children:
        os.kill(int(child), signal.SIGTERM)
    process.wait(30)


def test_every_json_line_parses_and_reads_as_one_fact_in_words(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path
) -> None:
    fake.delete(UPCOMING)  # a 404: "not supported here", said once
    faults = [
        Fault("reset", path=MAINTENANCE),
        Fault("status", path=PREEMPTED),
        Fault("no_flavor", path=UPCOMING),
    ]
    for fault in faults:
        fake.add_fault(fault)
    process = run_daemon(tmp_path, fake, workloads.device)
    log_path = tmp_path / "daemon.log"
    try:
        wait_for(lambda: '"daemon_started"' in log_path.read_text(), timeout=30, what="the daemon up")
        fake.set(MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE")
        wait_for(lambda: '"drain_finished"' in log_path.read_text(), timeout=30, what="the drain timed out")
        fake.set(MAINTENANCE, "NONE")
        wait_for(lambda: '"event_cleared"' in log_path.read_text(), timeout=30, what="the event cleared")
    finally:
        stop(process)
    text = log_path.read_text()
    lines = [json.loads(raw) for raw in text.splitlines()]  # every line is JSON, or this fails
    for line in lines:
        assert isinstance(line, dict)
        assert RFC3339_UTC.match(line["time"]), line
        assert line["severity"] in SEVERITIES, line
        assert "\n" not in line["message"], line
        said = line["message"]
        assert not any(r in said for r in REPRS), said
        assert all(said.count(key) <= 1 for key in KEYS), said
        if line["severity"] != "DEBUG":  # debug lines may give the raw numbers
            assert not EPOCH.search(said), said
    by_kind: dict[str, list[dict[str, object]]] = {}
    for line in lines:
        by_kind.setdefault(str(line.get("kind")), []).append(line)
    said = [line["message"] for line in lines if line["severity"] != "DEBUG"]
    assert len([m for m in said if "upcoming-maintenance" in m and "HTTP 404)" in m]) == 1, said  # said once
    errors = {line["error_kind"] for line in by_kind["metadata_error"]}
    assert {"connection_reset", "http_5xx", "missing_flavor"} <= errors
    assert all(line["message_id"] for kind, ls in by_kind.items() if kind != "None" for line in ls)
    (started,) = by_kind["event_started"]
    assert re.fullmatch(r"maintenance-event:TERMINATE_ON_HOST_MAINTENANCE@\S+Z", str(started["event_id"]))
    term, kill = by_kind["signal_sent"]
    assert (term["signal"], kill["signal"], term["pid"]) == ("SIGTERM", "SIGKILL", kill["pid"])
    assert f"pid {term['pid']} ({term['process']}" in str(term["message"])
    (finished,) = by_kind["drain_finished"]
    assert finished["severity"] == "ERROR"
    assert f"pid {term['pid']} ({term['process']})" in str(finished["message"])
    (ended,) = [line for line in lines if line.get("pid") == term["pid"] and line.get("kind") is None]
    assert " killed, gone after " in str(ended["message"]), ended  # never "unknown"
    # The soak checker's reading of the same lines: kinds, pids and signals it joins on.
    parsed = parse_daemon_log(text, instance=1)
    kinds = [p.kind for p in parsed if p.kind]
    for kind in ("daemon_started", "event_started", "drain_started", "signal_sent", "drain_finished"):
        assert kind in kinds
    assert [(p.get("pid"), p.get("signal")) for p in parsed if p.kind == "signal_sent"] == [
        (term["pid"], "SIGTERM"),
        (term["pid"], "SIGKILL"),
    ]
