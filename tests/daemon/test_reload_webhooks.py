"""Reloads that change notify.webhooks, in one process, against real receivers on loopback: the next
event's notices go to the new URLs at once; a removed webhook gets nothing new, but what it had queued
still reaches it without holding up the reload; a bad URL is refused; no log line shows a URL.
(A real SIGHUP to a real `tpu-watchdog run`, STATUS= included: tests/system/test_reload.py.)"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from pathlib import Path

import pytest

from tests.support.daemon_harness import PREEMPTED, DaemonHarness
from tests.support.waiting import wait_for
from tests.support.webhook_receiver import SECRET_PATH, WebhookReceiver
from tests.support.workloads import Workloads
from watchdog.config.settings import Config, load_config
from watchdog.daemon.sighup import ReloadAsked
from watchdog.fake.server import FakeMetadataServer

EVERY_MOMENT = ["event_started", "drain_started", "drain_finished", "event_cleared"]
pytestmark = pytest.mark.slow


def _reload(harness: DaemonHarness, webhooks: tuple[str, ...]) -> None:
    """A reload whose file now says `webhooks` (everything else as at start-up); returns once applied."""
    new = dataclasses.replace(harness.config, webhooks=webhooks)
    harness.daemon.reloader.load = lambda: new
    harness.daemon.inbox.put(ReloadAsked())
    wait_for(lambda: harness.daemon.config.webhooks == webhooks, what=f"the reload to {len(webhooks)} URL(s)")


def _event(harness: DaemonHarness) -> None:
    """One preemption that comes and goes (no process holds the device: the drain ends at once)."""
    harness.fake.set(PREEMPTED, "TRUE")
    harness.wait_metric("tpu_watchdog_drains_total", 1, outcome="no_holders")
    harness.fake.set(PREEMPTED, "FALSE")
    harness.wait_state("idle")


def _no_url_in(caplog: pytest.LogCaptureFixture) -> None:
    lines = [record.getMessage() for record in caplog.records]
    assert lines
    for line in lines:
        assert SECRET_PATH not in line, line


def test_a_reload_adding_a_webhook_sends_it_the_next_event(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with (
        WebhookReceiver(statuses=[]) as receiver,
        DaemonHarness(tmp_path / "state", fake, workloads) as harness,
    ):
        _reload(harness, (receiver.url,))
        port = receiver.server.server_address[1]
        said = next(r.getMessage() for r in caplog.records if "configuration reloaded" in r.getMessage())
        assert f"applied notify.webhooks [] -> [http://127.0.0.1:{port}/…redacted]" in said
        (shown,) = harness.daemon.view.status()["webhooks"]  # type: ignore[misc]
        assert shown["webhook"] == f"http://127.0.0.1:{port}/…redacted"
        _event(harness)
        wait_for(lambda: receiver.types() == EVERY_MOMENT, what=f"every notice (now {receiver.types()})")
        harness.wait_metric("tpu_watchdog_webhooks_sent_total", 4)  # the daemon's own metrics, as at start
    _no_url_in(caplog)


def test_a_reload_removing_the_webhook_sends_it_nothing_new_and_waits_for_no_receiver(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    child = workloads.start(
        "report"
    )  # says "term" at SIGTERM and holds on: the drain runs through the reload
    with WebhookReceiver(statuses=[]) as receiver:
        harness = DaemonHarness(
            tmp_path / "state", fake, workloads, preemption_grace=60.0, webhooks=(receiver.url,)
        )
        with harness:
            receiver.hold()
            fake.set(PREEMPTED, "TRUE")
            child.expect("term")  # event_started and drain_started are told, the first one in flight
            wait_for(lambda: receiver.holding == 1, what="event_started in flight, unanswered")
            _reload(harness, ())  # applied while the receiver holds its answer: nothing waited for it
            fake.set(PREEMPTED, "FALSE")  # the drain is cancelled, the event cleared: told to no one
            harness.wait_state("idle")
            assert harness.daemon.view.status()["webhooks"] == []
            receiver.release()
            child.popen.kill()  # so that the next event has nothing to drain
            child.popen.wait(timeout=20)
            _event(harness)
        # The daemon has stopped, having given every sender its time: what was queued before the reload
        # went to the URL it was queued for; nothing of what happened after it did.
        assert receiver.types() == ["event_started", "drain_started"]
        assert harness.metric("tpu_watchdog_webhook_failures_total", reason="stopped") == 0
    _no_url_in(caplog)


def test_a_reload_replacing_the_webhook_sends_the_next_event_to_the_new_one(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with WebhookReceiver(statuses=[]) as old, WebhookReceiver(statuses=[]) as new:
        with DaemonHarness(tmp_path / "state", fake, workloads, webhooks=(old.url,)) as harness:
            _reload(harness, (new.url,))
            _event(harness)
            wait_for(lambda: new.types() == EVERY_MOMENT, what=f"every notice at the new URL ({new.types()})")
        assert old.arrivals == []
    _no_url_in(caplog)


@pytest.mark.parametrize(
    "bad", [f"ftp://127.0.0.1{SECRET_PATH}", f"http://[::1{SECRET_PATH}", f"https://{SECRET_PATH}"]
)
def test_a_bad_webhook_after_a_good_one_is_refused_and_the_good_one_kept(
    bad: str, fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    path = tmp_path / "config.toml"
    path.write_text(f'[notify]\nwebhooks = ["{bad}"]\n')
    with (
        WebhookReceiver(statuses=[]) as receiver,
        DaemonHarness(tmp_path / "state", fake, workloads) as harness,
    ):
        _reload(harness, (receiver.url,))
        before: Config = harness.daemon.config
        harness.daemon.reloader.load = lambda: load_config(argparse.Namespace(config=str(path)), {})
        harness.daemon.inbox.put(ReloadAsked())
        wait_for(lambda: "reload refused" in caplog.text, what="the refusal")
        assert harness.daemon.config is before
        assert f"{path}: notify.webhooks: " in caplog.text
        assert "(shown redacted) is not an http:// or https:// URL with a host" in caplog.text
        _event(harness)
        wait_for(
            lambda: receiver.types() == EVERY_MOMENT,
            what=f"the good webhook's notices ({receiver.types()})",
        )
    _no_url_in(caplog)
