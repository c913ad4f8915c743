"""What the daemon says during and after a drain: a progress line at a steady interval, a timed-out drain
as an ERROR naming each process that had to be killed, and event ids from an older state file still
matching their drain (ids are opaque once made)."""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.daemon_harness import PREEMPTED, DaemonHarness
from tests.support.workloads import Workloads
from watchdog.config.settings import default_config
from watchdog.core.clock import SystemClock
from watchdog.core.drain_record import SignalResult
from watchdog.core.ladder import ladder_for
from watchdog.core.lifecycle import ActiveDrain, Event, EventStarted, Lifecycle
from watchdog.core.moments import RESUMED, DrainStarted, HoldersFound, ProcessSignalled
from watchdog.core.process import ProcessIdentity
from watchdog.daemon.announce import LogLines
from watchdog.daemon.notices import Notices
from watchdog.daemon.outputs import Outputs
from watchdog.daemon.telling import LifecycleGauges, SiteHooks, Telling
from watchdog.fake.server import FakeMetadataServer
from watchdog.store.statefile import StateStore
from watchdog.surface.hooks import HookRunner
from watchdog.surface.logs import KIND
from watchdog.surface.metrics import Metrics


def said(caplog: pytest.LogCaptureFixture, kind: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.__dict__.get(KIND) == kind]


def test_a_long_drain_says_how_it_goes_and_a_timeout_is_an_error_naming_the_killed(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    stubborn = workloads.start("ignore")
    with DaemonHarness(
        state_dir, fake, workloads, preemption_grace=3.0, wiring={"progress_interval": 0.5}
    ) as harness:
        fake.set(PREEMPTED, "TRUE")
        harness.wait_state("timed_out")
    progress = said(caplog, "drain_progress")
    assert len(progress) >= 2  # 3 s of drain, a line every 0.5 s (the loop ticks every second at worst)
    pid = stubborn.popen.pid
    # 0 of 1: a line can fall between the SIGKILLed process's exit and the drain's end reaching the loop.
    running = rf"(1 of 1 still running \(pid {pid} \S+\)|0 of 1 still running)"
    shape = rf"{running}; deadline (in \d+ s|passed just now) \(\S+Z\), then SIGKILL"
    for record in progress:
        assert re.search(shape, record.getMessage()), record.getMessage()
    assert f"1 of 1 still running (pid {pid} " in progress[0].getMessage()
    (finished,) = said(caplog, "drain_finished")
    assert finished.levelno == logging.ERROR
    assert re.search(rf"killed at the deadline, progress since its last checkpoint lost: pid {pid} \(\S+\)$",
                     finished.getMessage())  # fmt: skip


def test_a_drain_that_ends_in_time_is_a_warning_with_no_progress_line(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    workloads.start("handled")
    with DaemonHarness(state_dir, fake, workloads, wiring={"progress_interval": 30.0}) as harness:
        fake.set(PREEMPTED, "TRUE")
        harness.wait_state("drained")
    (finished,) = said(caplog, "drain_finished")
    assert finished.levelno == logging.WARNING
    assert "lost" not in finished.getMessage()
    assert said(caplog, "drain_progress") == []


def test_an_old_style_event_id_on_file_still_matches_its_drain(tmp_path: Path) -> None:
    old = "preempted:TRUE@1796126718.006"  # how ids were made before they read as UTC times
    StateStore(str(tmp_path)).save_lifecycle(
        [Event(old, "preempted", "TRUE", 1796126718.006, deadline=1796126743.006)],
        ActiveDrain([old], 1796126718.1, 1796126743.006), None, on_timeout="kill",
    )  # fmt: skip
    saved = StateStore(str(tmp_path)).state
    life = Lifecycle.restored(saved.events, saved.drain, saved.last_outcome)
    assert life.drain is not None
    assert life.drain.event_ids == [old]
    assert life.events["preempted"].event_id == old


def test_an_event_with_a_deadline_past_year_9999_is_announced_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A far deadline (a huge grace) once made the event-start line raise before its drain started."""
    caplog.set_level(logging.INFO)
    config = default_config()
    metrics = Metrics()
    notices = Notices(None, dict, SystemClock(), dry_run=False)
    subscribers = [
        LifecycleGauges(metrics), LogLines(ladder_for(config.on_timeout), config.dry_run), notices,
        SiteHooks(HookRunner.from_config(config), config.dry_run),
    ]  # fmt: skip
    telling = Telling(Outputs(metrics), Lifecycle(), subscribers)
    far = Event("e1", "maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE", 1.0e9, deadline=1.0e12)
    telling.tell(EventStarted(far))
    (started,) = said(caplog, "event_started")
    assert "deadline 9999-12-31T23:59:59.999Z" in started.getMessage()
    assert metrics.registry.get_sample_value("tpu_watchdog_output_errors_total", {"output": "log"}) == 0


def test_a_signal_is_one_line_naming_the_process_and_a_dry_run_says_nothing_was_sent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lines = LogLines(ladder_for("kill"), dry_run=False)
    who = ProcessIdentity(4242, 77)
    sent = ProcessSignalled(who, "train", 15, SignalResult.SENT, "d1", ("e1",), True, None, dry_run=False)
    lines.told(sent, Lifecycle())
    lines.told(replace(sent, dry_run=True), Lifecycle())
    first, dry = said(caplog, "signal_sent")
    assert first.getMessage() == "SIGTERM to pid 4242 (train, start time 77, late arrival): sent"
    assert (
        dry.getMessage()
        == "[dry run] would send SIGTERM to pid 4242 (train, start time 77, late arrival): not sent"
    )


def test_a_drains_first_line_says_whom_it_signals_and_a_reopened_one_only_the_new(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lines = LogLines(ladder_for("kill"), dry_run=False)
    found = HoldersFound("preempted", "d1", False, 3, 3, ladder_for("kill"), False, None, 1.8e9 + 25, 1.8e9)
    lines.told(found, Lifecycle())
    lines.told(
        replace(found, cause="maintenance-event", late=True, fresh=1, started_wall=1.8e9 - 60), Lifecycle()
    )
    first, reopened = (r.getMessage() for r in said(caplog, "drain_started"))
    assert first.startswith("draining 3 TPU holder(s) for preempted: SIGTERM now, deadline ")
    assert first.endswith("(in 25 s), then SIGKILL what still holds a device")
    assert reopened.startswith(
        "late arrival: reopened drain d1 (started 2027-01-15T07:59:00.000Z): 3 TPU holder(s) hold a device, "
        "SIGTERM now to the 1 not yet signalled"
    )


def test_a_resumed_drain_says_its_start_and_unchanged_deadline_once(caplog: pytest.LogCaptureFixture) -> None:
    """A drain on file that goes on after a restart is one `DrainStarted` (cause RESUMED): its line names
    when it began and the deadline it keeps; a new drain's start says nothing here (HoldersFound does)."""
    caplog.set_level(logging.INFO)
    lines = LogLines(ladder_for("kill"), dry_run=False)
    life = Lifecycle(drain=ActiveDrain(["e1"], 1.8e9, 1.8e9 + 300))
    lines.told(DrainStarted(RESUMED, 1.8e9 + 300, 1.8e9 + 60), life)
    lines.told(DrainStarted("maintenance-event", 1.8e9 + 300, 1.8e9 + 60), life)
    (line,) = [r.getMessage() for r in said(caplog, "state_recovered")]
    assert line == (
        "resuming the drain started at 2027-01-15T08:00:00.000Z: deadline unchanged, "
        "2027-01-15T08:05:00.000Z (in 240 s)"
    )
