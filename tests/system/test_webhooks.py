"""Webhooks through the whole daemon, against a real receiver on loopback that first answers 503: the
notice of an event arrives at detection (while its drain still runs), every moment of the event is told,
a receiver that never answers delays no signal, and the URL is never shown (logs, /status, status --json,
`tpu-watchdog config`)."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.commands.test_status import status
from tests.support.daemon_harness import MAINTENANCE, PREEMPTED, DaemonHarness
from tests.support.waiting import wait_for
from tests.support.webhook_receiver import SECRET_PATH, WebhookReceiver
from tests.support.workloads import Workloads
from watchdog.fake.server import FakeMetadataServer
from watchdog.surface.httpapi import HttpSurface
from watchdog.surface.logs import KIND, JsonLines

REPO = Path(__file__).resolve().parents[2]
RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
pytestmark = pytest.mark.slow


def test_every_moment_is_told_and_event_started_arrives_while_the_drain_runs(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    child = workloads.start("ignore")  # holds on through SIGTERM: the drain lasts until its deadline
    state = {"now": "not started"}
    with WebhookReceiver(statuses=[503], probe=lambda: state["now"]) as receiver:
        harness = DaemonHarness(
            tmp_path / "state", fake, workloads, preemption_grace=6.0, webhooks=(receiver.url,)
        )
        with harness:
            state["now"] = "running"
            receiver.probe = lambda: harness.state
            http = HttpSurface("127.0.0.1:0", harness.daemon.view)
            http.start()
            try:
                fake.set(PREEMPTED, "TRUE")
                harness.wait_state("timed_out")
                fake.set(PREEMPTED, "FALSE")
                harness.wait_state("idle")
                wait_for(lambda: len(receiver.types()) == 4, what=f"four notices (now {receiver.types()})")
                shown = json.dumps(harness.daemon.view.status(), ensure_ascii=False)
                raw = status(tmp_path, http.address, "--json")
            finally:
                http.stop()
            sent = harness.metric("tpu_watchdog_webhooks_sent_total")
            failed = harness.metric("tpu_watchdog_webhook_failures_total", reason="retries_exhausted")
    first, *_ = receiver.arrivals
    assert (first.status, first.body["type"]) == (503, "event_started")  # then tried again
    started = next(a for a in receiver.arrivals if a.status == 200)
    assert (started.body["type"], started.seen) == ("event_started", "draining")  # the drain was not over
    assert receiver.types() == ["event_started", "drain_started", "drain_finished", "event_cleared"]
    for body in receiver.delivered():
        assert RFC3339_UTC.match(body["time"]), body["time"]
        assert {"instance_id", "name", "zone", "accelerator_type", "worker"} <= set(body["host"])
        assert body["event"]["key"] == "instance/preempted"
        assert body["event"]["value"] == "TRUE"
        assert body["text"].startswith("tpu-watchdog on ")
        assert "\n" not in body["text"]
    finished = receiver.delivered()[2]
    assert finished["outcome"] == "timed_out"
    (proc,) = finished["processes"]
    assert (proc["pid"], proc["signals"], proc["end"]) == (child.popen.pid, ["SIGTERM", "SIGKILL"], "killed")
    lost = f"checkpoint lost: pid {child.popen.pid} ({proc['name']}"  # then its workload, if any
    assert lost in finished["text"]
    # Each notice's text is the journal's line of the same moment, word for word.
    said = {getattr(r, KIND, None): r.getMessage() for r in caplog.records}
    for body in receiver.delivered():
        assert body["text"].endswith(f": {said[body['type']]}"), (body["text"], said[body["type"]])
    assert (sent, failed) == (4, 0)
    assert raw.returncode == 0, raw.stderr
    assert "/…redacted" in shown
    lines = [r.getMessage() for r in caplog.records] + [JsonLines().format(r) for r in caplog.records]
    for where, text in [
        ("/status", shown),
        ("status --json", raw.stdout),
        *(("log", line) for line in lines),
    ]:
        assert SECRET_PATH not in text, where


def test_a_webhook_that_never_answers_delays_no_signal(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path
) -> None:
    workloads.start("handled")
    with WebhookReceiver(statuses=[]) as receiver:
        receiver.hold()
        with DaemonHarness(tmp_path / "state", fake, workloads, webhooks=(receiver.url,)) as harness:
            fake.set(MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE")
            harness.wait_state("drained")
            assert harness.metric("tpu_watchdog_signals_sent_total", signal="SIGTERM") == 1
            # The sender's thread may connect after the drain is over: the drain never waited for it.
            wait_for(lambda: receiver.holding == 1, what="event_started held, unanswered")
            assert receiver.arrivals == []
            receiver.release()
            wait_for(
                lambda: "drain_finished" in receiver.types(), what="the notices once the receiver answers"
            )


def config_output(*args: str, environ: dict[str, str] | None = None) -> tuple[str, str]:
    """stdout and stderr (a --webhook flag's warning) of `tpu-watchdog config`."""
    done = subprocess.run(
        [sys.executable, "-m", "watchdog", "config", "--config", os.devnull, *args],
        capture_output=True, text=True, timeout=60, check=True, cwd=REPO,
        env={"PATH": os.environ.get("PATH", ""), **(environ or {})},
    )  # fmt: skip
    return done.stdout, done.stderr


@pytest.mark.parametrize("form", ["flag", "env", "json"])
def test_the_config_command_shows_a_webhook_redacted(form: str) -> None:
    url = f"https://hooks.example.com{SECRET_PATH}?token=t0ps3cret"
    if form == "env":
        out, err = config_output(environ={"TPU_WATCHDOG_NOTIFY_WEBHOOKS": url})
    else:
        out, err = config_output("--webhook", url, *(["--json"] if form == "json" else []))
    if form == "json":
        out = json.dumps(json.loads(out), ensure_ascii=False)
    out += err
    assert "https://hooks.example.com/…redacted" in out
    assert SECRET_PATH not in out
    assert "t0ps3cret" not in out


def test_a_bad_webhook_url_is_refused_without_showing_it() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "watchdog", "config", "--config", os.devnull, "--webhook", f"ftp://h{SECRET_PATH}"],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 78
    assert "--webhook: notify.webhooks: ftp://h/…redacted (shown redacted) is not an http" in done.stderr
    assert SECRET_PATH not in done.stderr
