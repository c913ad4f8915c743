"""Reloads in one process: what waits for the event in progress, what applies at once, what never does.
(A real SIGHUP to a real `tpu-watchdog run`, with a good and a bad file: tests/system/test_reload.py.)"""

from __future__ import annotations

import dataclasses
import logging
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.support.daemon_harness import UPCOMING, DaemonHarness
from tests.support.waiting import wait_for
from tests.support.workloads import Workloads
from watchdog.config.schema import BY_KEY
from watchdog.config.settings import Config, ConfigError
from watchdog.daemon.reload import LIVE
from watchdog.daemon.sighup import ReloadAsked
from watchdog.fake.server import FakeMetadataServer


def _reload(harness: DaemonHarness, load: Config | Exception) -> None:
    def loader() -> Config:
        if isinstance(load, Exception):
            raise load
        return load

    harness.daemon.reloader.load = loader
    harness.daemon.inbox.put(ReloadAsked())


def test_every_live_key_is_a_setting() -> None:
    assert set(BY_KEY) >= LIVE


def test_a_drain_before_the_window_keeps_its_deadline_when_the_reload_shortens_the_lead(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    """drain_before_window is evaluated every tick: applied at once, a shorter lead would move the running
    drain's deadline earlier as soon as the new lead is due. It waits for the event to end instead."""
    workloads.start("report")
    window_start = time.time() + 6
    stamp = datetime.fromtimestamp(window_start, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    with DaemonHarness(state_dir, fake, workloads, drain_before_window=10.0) as harness:
        fake.set(UPCOMING, {"window_start_time": stamp, "maintenance_status": "PENDING", "type": "SCHEDULED"})
        harness.wait_state("draining")
        drain = harness.daemon.lifecycle.drain
        assert drain is not None
        deadline = drain.deadline
        _reload(harness, dataclasses.replace(harness.config, drain_before_window=2.0))
        wait_for(lambda: harness.daemon.config.drain_before_window == 2.0, what="the reload")
        due = window_start - 2.0  # when the new lead would have re-evaluated the event
        wait_for(lambda: time.time() > due + 1.5, timeout=15, what="the new lead's due time, and a tick")
        assert harness.daemon.lifecycle.drain is not None
        assert harness.daemon.lifecycle.drain.deadline == deadline
        assert harness.daemon.notice_timing.policy.drain_before_window == 10.0  # still the event's own


def test_a_file_that_does_not_load_changes_nothing(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tpu-watchdog")
    with DaemonHarness(state_dir, fake, workloads) as harness:
        before = harness.daemon.config
        _reload(harness, ConfigError("/etc/tpu-watchdog/config.toml: not valid TOML: line 3"))
        wait_for(lambda: "reload refused" in caplog.text, what="the refusal")
        assert harness.daemon.config is before
        assert "not valid TOML: line 3" in caplog.text


def test_idle_a_new_policy_applies_at_once(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    with DaemonHarness(state_dir, fake, workloads) as harness:
        _reload(harness, dataclasses.replace(harness.config, preemption_grace=7.0, dry_run=True))
        wait_for(lambda: harness.daemon.notice_timing.policy.preemption_grace == 7.0, what="the new grace")
        assert harness.daemon.config.dry_run is False  # restart-only: the running value stays
