"""One drain, one record: a drain cut by a restart is told the same way by every surface (its start, its
duration, its processes). Real daemons (in-process, through compose), real holders, real signals, a real
webhook receiver; the history read back from the file."""

from __future__ import annotations

import logging
import signal
from pathlib import Path

import pytest

from tests.support.daemon_harness import MAINTENANCE, DaemonHarness
from tests.support.waiting import wait_for
from tests.support.webhook_receiver import WebhookReceiver
from tests.support.workloads import Workloads
from watchdog.core.clock import parse_utc_text
from watchdog.fake.server import FakeMetadataServer
from watchdog.store.drain_entry import SIGTERM_DEATHS
from watchdog.store.drain_text import ended_line, one_line, process_line, processes_of, totals
from watchdog.store.history import HISTORY_FILE, load_entries
from watchdog.surface.logs import KIND

TERMINATE = "TERMINATE_ON_HOST_MAINTENANCE"
DURATION = "tpu_watchdog_drain_duration_seconds_sum"
HOLDERS = "tpu_watchdog_device_holders"


def test_a_resumed_drain_keeps_its_start_and_its_processes_everywhere(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tpu-watchdog")
    leaves = workloads.start("handled")  # exits on SIGTERM before the restart
    stays = workloads.start("report")  # never exits: the deadline's SIGKILL ends it, after the restart
    state_dir = tmp_path / "state"
    with WebhookReceiver(statuses=[]) as receiver:
        config = {"maintenance_grace": 5.0, "webhooks": (receiver.url,)}
        with DaemonHarness(state_dir, fake, workloads, **config) as first:  # type: ignore[arg-type]
            fake.set(MAINTENANCE, TERMINATE)
            stays.expect("term")
            assert leaves.popen.wait(timeout=10) == 0
            drain_id = first.daemon.lifecycle.drain.drain_id  # type: ignore[union-attr]
        caplog.clear()
        with DaemonHarness(state_dir, fake, workloads, **config) as again:  # type: ignore[arg-type]
            assert stays.popen.wait(timeout=15) == -signal.SIGKILL
            again.wait_state("timed_out")
            record = again.daemon.last_record
            duration = again.metric(DURATION)
            shown = again.daemon.view.status()["last_drain"]
        finished = wait_for(
            lambda: [b for b in receiver.delivered() if b["type"] == "drain_finished"], what="the notice"
        )
        resumed = [b for b in receiver.delivered() if b["type"] == "drain_started"][-1]
    (entry,) = [e for e in load_entries(str(state_dir / HISTORY_FILE)) if e["outcome"]]
    assert entry["id"] == drain_id
    started = parse_utc_text(str(entry["started"]))
    assert record is not None
    assert abs(record.started_wall - started) < 0.01  # the first run's start, not the restart's
    assert abs(record.ended - record.started - float(entry["duration"])) < 0.01  # type: ignore[operator]
    assert abs(duration - float(entry["duration"])) < 0.01  # type: ignore[arg-type]
    assert len(record.processes) == len(entry["processes"]) == 2  # type: ignore[arg-type]
    assert resumed["drain_id"] == drain_id
    # Each process's end, and its exit status, the same word and type in /status, the history, the webhook.
    ends = {p["pid"]: (p["end"], p["exit_status"], p["exit_signal"]) for p in entry["processes"]}  # type: ignore[union-attr]
    assert {pid: end for pid, (end, _, _) in ends.items()} == {
        leaves.popen.pid: "exited",
        stays.popen.pid: "killed",
    }
    # The one that exited before the restart, when the first run saw it: its end was kept with the drain.
    (left,) = [p for p in entry["processes"] if p["pid"] == leaves.popen.pid]  # type: ignore[union-attr]
    assert isinstance(left["ended_after"], float), left
    assert 0 < left["ended_after"] < 5.0, left  # before the first run stopped, well inside the grace
    assert shown == entry  # /status `last_drain` is the history's entry itself
    (notice,) = finished
    assert {p["pid"]: (p["end"], p["exit_status"], p["exit_signal"]) for p in notice["processes"]} == ends
    assert notice["drain_id"] == drain_id
    assert abs(parse_utc_text(str(notice["started"])) - started) < 0.01
    assert len(notice["processes"]) == 2  # type: ignore[arg-type]
    # One sentence for the drain's end, and one line per process: `status`'s and `history`'s own words.
    assert str(notice["text"]).endswith(f": {ended_line(entry)}")
    assert ended_line(entry).startswith(f"drain {one_line(entry)}")
    journal = [r.message for r in caplog.records if getattr(r, KIND, None) == "drain_finished"]
    assert journal == [ended_line(entry)]
    after = [r.message for r in caplog.records][[r.message for r in caplog.records].index(journal[0]) + 1 :]
    assert after[:2] == [f"  {process_line(p)}" for p in processes_of(entry)]
    said = [r.message for r in caplog.records if getattr(r, KIND, None) == "drain_started"]
    assert said
    assert "SIGTERM now" not in said[-1]  # nothing is sent: both were signalled before
    assert f"resumed drain {drain_id}" in said[-1]
    assert str(resumed["text"]).endswith(f": {said[-1]}")  # the drain's start: one sentence on both
    assert resumed["holders"] == 1  # the one still there


def test_the_holder_gauge_and_status_follow_the_drain_s_scans(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path
) -> None:
    """During a drain `tpu_watchdog_device_holders` and /status `holders` are who holds a device now (the
    drain's rescans), not the last idle scan: an exit lowers them, a late arrival raises them."""
    leaves = workloads.start("handled")
    stays = workloads.start("report")
    with DaemonHarness(tmp_path / "state", fake, workloads, maintenance_grace=60.0) as harness:
        harness.wait_metric(HOLDERS, 2)
        fake.set(MAINTENANCE, TERMINATE)
        stays.expect("term")
        assert leaves.popen.wait(timeout=10) == 0
        wait_for(lambda: harness.metric(HOLDERS) == 1, what="the gauge after the exit")
        assert [h["pid"] for h in harness.daemon.view.status()["holders"]] == [stays.popen.pid]
        late = workloads.start("report")
        late.expect("term")  # the drain's rescan found it and signalled it
        wait_for(lambda: harness.metric(HOLDERS) == 2, what="the gauge with the late arrival")
        assert harness.state == "draining"
        pids = {h["pid"] for h in harness.daemon.view.status()["holders"]}
        assert pids == {stays.popen.pid, late.popen.pid}


def test_a_holder_that_died_of_sigterm_before_a_restart_is_still_told_as_unsaved(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path
) -> None:
    """Its exit came while the first run drained or was stopping: the run that ends the drain never saw
    it. The SIGTERM disposition written ahead with the intent still tells that it had no handler, so the
    history says it died of SIGTERM's default action (no checkpoint), not that it exited on SIGTERM."""
    unsaved = workloads.start("default")  # no handler: SIGTERM's default action kills it at once
    stays = workloads.start("report")  # keeps the drain open across the restart
    state_dir = tmp_path / "state"
    with DaemonHarness(state_dir, fake, workloads, maintenance_grace=4.0) as first:
        fake.set(MAINTENANCE, TERMINATE)
        stays.expect("term")
        assert unsaved.popen.wait(timeout=10) == -signal.SIGTERM
        assert first.state == "draining"
    with DaemonHarness(state_dir, fake, workloads, maintenance_grace=4.0) as again:
        assert stays.popen.wait(timeout=15) == -signal.SIGKILL
        again.wait_state("timed_out")
        record = again.daemon.last_record
    (entry,) = [e for e in load_entries(str(state_dir / HISTORY_FILE)) if e["outcome"]]
    [shown] = [p for p in entry["processes"] if p["pid"] == unsaved.popen.pid]  # type: ignore[union-attr]
    assert (shown["end"], shown["sigterm"]) == ("exited", "default")
    assert shown["detail"] in SIGTERM_DEATHS  # seen by the first run (its end kept), or inferred
    assert "1 died of SIGTERM's default action (no checkpoint)" in totals(entry)
    assert record is not None
