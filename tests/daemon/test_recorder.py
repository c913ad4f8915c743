"""daemon/recorder.py: every drain goes to the history; a rehearsal (dry run) is recorded as one and counts
nothing a real drain counts, nor sets the daemon's state to timed_out, across a restart too."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from tests.daemon.test_view import view_of
from tests.support.daemon_harness import MAINTENANCE, DaemonHarness
from tests.support.waiting import wait_for
from tests.support.workloads import Workloads
from watchdog.config.settings import default_config
from watchdog.core.clock import SystemClock
from watchdog.core.drain_record import DrainRecord
from watchdog.core.identity import host_fields
from watchdog.core.lifecycle import Lifecycle, Trigger
from watchdog.core.moments import DrainEnded, moment_of
from watchdog.core.process import ProcessIdentity
from watchdog.core.vocabulary import FINISHED_OUTCOMES, Outcome
from watchdog.daemon.outputs import Outputs
from watchdog.daemon.recorder import HistoryEntries
from watchdog.fake.server import FakeMetadataServer
from watchdog.fake.vm_identity import TpuIdentity
from watchdog.store.history import HISTORY_FILE, load_entries
from watchdog.store.records import Intent
from watchdog.store.statefile import StateStore
from watchdog.surface.metrics import Metrics

TERMINATE = "TERMINATE_ON_HOST_MAINTENANCE"


def real_counts(harness: DaemonHarness) -> dict[str, float]:
    counts = {
        o.value: harness.metric("tpu_watchdog_drains_total", outcome=o.value) for o in FINISHED_OUTCOMES
    }
    counts["duration"] = harness.metric("tpu_watchdog_drain_duration_seconds_count")
    counts["SIGTERM"] = harness.metric("tpu_watchdog_signals_sent_total", signal="SIGTERM")
    counts["SIGKILL"] = harness.metric("tpu_watchdog_signals_sent_total", signal="SIGKILL")
    return counts


def test_a_dry_run_counts_nothing_and_is_recorded_as_a_rehearsal(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stubborn = workloads.start("report")  # would need SIGKILL: the rehearsal "times out"
    state_dir = tmp_path / "state"
    with DaemonHarness(state_dir, fake, workloads, dry_run=True, maintenance_grace=1.0) as harness:
        assert harness.metric("tpu_watchdog_dry_run") == 1
        fake.set(MAINTENANCE, TERMINATE)
        harness.wait_metric("tpu_watchdog_dry_run_drains_total", 1, outcome="timed_out")
        harness.wait_state("drained")
        assert set(real_counts(harness).values()) == {0.0}
        assert harness.metric("tpu_watchdog_state", state="timed_out") == 0
        assert harness.daemon.view.status()["recent_drains"][0]["dry_run"] is True
    (entry,) = load_entries(str(state_dir / HISTORY_FILE))
    assert (entry["outcome"], entry["dry_run"]) == ("timed_out", True)
    (proc,) = entry["processes"]
    assert (proc["pid"], proc["signals"], proc["would_send"], proc["end"]) == (
        stubborn.popen.pid,
        [],  # nothing was sent ...
        ["SIGTERM", "SIGKILL"],  # ... this is what a real drain would have
        "still_running",
    )
    assert stubborn.alive()
    said = [r.getMessage() for r in caplog.records if f"to pid {stubborn.popen.pid} " in r.getMessage()]
    assert said, caplog.text  # its log says what a real drain would have sent, and that nothing was
    assert all(line.startswith("[dry run] would send SIG") and line.endswith(": not sent") for line in said)
    (started,) = [r.getMessage() for r in caplog.records if "TPU holder(s)" in r.getMessage()]
    assert started.startswith(
        "[dry run] draining 1 TPU holder(s) for maintenance-event: would send SIGTERM now"
    )
    assert "after SIGKILL" not in caplog.text  # nothing was sent, so nothing ran on after one
    # Restarted with the event still on, and dry run now off: the rehearsal's outcome is still not a state.
    with DaemonHarness(state_dir, fake, workloads, maintenance_grace=1.0) as again:
        assert again.state == "drained"
        assert again.metric("tpu_watchdog_dry_run") == 0
        assert again.metric("tpu_watchdog_state", state="timed_out") == 0
    assert stubborn.alive()  # its event was rehearsed: never drained for real afterwards either


def test_a_real_drain_counts_and_its_history_says_so(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path
) -> None:
    workloads.start("handled")
    with DaemonHarness(tmp_path / "state", fake, workloads) as harness:
        assert harness.metric("tpu_watchdog_dry_run") == 0
        fake.set(MAINTENANCE, TERMINATE)
        harness.wait_metric("tpu_watchdog_drains_total", 1, outcome="exited")
        assert harness.metric("tpu_watchdog_dry_run_drains_total", outcome="exited") == 0
        assert harness.metric("tpu_watchdog_history_persisted") == 1
        (entry,) = harness.daemon.recorder.history.entries()
        assert (entry["outcome"], entry["dry_run"]) == ("exited", False)
        assert entry["host"] == {}  # the identity is not asked for here: nothing known, nothing said


def test_each_entry_names_its_host_as_the_webhooks_do_with_what_is_known(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path
) -> None:
    fake.set_identity(TpuIdentity("v5litepod-16", "train-b", worker=2, hosts=4, slice_id=1, num_slices=2,
                                  coordinator="10.130.0.2:8476"))  # fmt: skip
    workloads.start("handled")
    with DaemonHarness(tmp_path / "state", fake, workloads, host_info=True) as harness:
        known = wait_for(lambda: harness.daemon.view.host["multislice_coordinator"], 30, what="the identity")
        fake.set(MAINTENANCE, TERMINATE)
        harness.wait_metric("tpu_watchdog_drains_total", 1, outcome="exited")
        labels = harness.daemon.view.host
    [entry] = load_entries(str(tmp_path / "state" / HISTORY_FILE))
    assert entry["host"] == {k: v for k, v in host_fields(labels).items() if v}  # the webhooks' fields
    assert entry["host"]["tpu_node"] == "train-b"
    assert (entry["host"]["slice_id"], entry["host"]["num_slices"]) == ("1", "2")
    assert entry["host"]["multislice_coordinator"] == known
    assert entry["host"]["worker"] == "2"
    assert entry["host"]["slice_hosts"] == "4"  # the slice's hosts, from worker-network-endpoints
    assert "" not in entry["host"].values()  # only what is known


def test_the_history_subscribes_a_drain_is_opened_when_told_started_and_written_when_told_ended(
    tmp_path: Path,
) -> None:
    """The recorder hears the moments as every output does: the opening entry at `DrainStarted`, the
    ended entry and its count at `DrainEnded`, from the drain as it was when it ended (the lifecycle has
    none by then), and /status's `last_drain` from the recorder."""
    store, metrics = StateStore(str(tmp_path)), Metrics()
    config = dataclasses.replace(default_config(), state_dir=str(tmp_path))
    recorder = HistoryEntries(store, config, metrics, SystemClock(), Outputs(metrics))
    life, now = Lifecycle(), time.time()
    started = life.observe("maintenance-event", Trigger("maintenance-event", TERMINATE, 30.0), now)
    drain, event = life.drain, life.drain_event()
    assert drain is not None
    store.apply(store.lifecycle_change(life.events.values(), drain, None, on_timeout="kill"))  # the loop's
    for action in started:
        recorder.told(moment_of(action, 1.8e9), life)
    opened = recorder.history.find(drain.drain_id)
    assert opened is not None
    assert opened["outcome"] is None
    record = DrainRecord(0.0, now, 30.0, "kill", dry_run=False, outcome=Outcome.EXITED, ended=2.5)
    life.drain_finished(Outcome.EXITED.value, now + 2.5)
    assert life.drain is None
    entry = recorder.entry_of(record, drain, life)  # the loop's, once, for every subscriber
    recorder.told(DrainEnded(record, event, drain, life.state.value, None, entry), life)
    ended = recorder.history.find(drain.drain_id)
    assert ended is not None
    assert ended == entry  # the history writes the entry the moment carries
    assert (ended["outcome"], recorder.last_drain) == ("exited", ended)
    assert metrics.registry.get_sample_value("tpu_watchdog_drains_total", {"outcome": "exited"}) == 1
    assert recorder.current is None  # no drain runs now
    assert view_of(life, SystemClock(), tmp_path, account=recorder).status()["last_drain"] == ended


def test_a_drain_s_opening_entry_waits_for_the_state_file_to_know_the_drain(tmp_path: Path) -> None:
    """Killed between the two writes, a daemon must not leave in the history a drain its state file never
    had: the restart would start another drain for the same event, and the history would hold two."""
    store, metrics = StateStore(str(tmp_path)), Metrics()
    config = dataclasses.replace(default_config(), state_dir=str(tmp_path))
    recorder = HistoryEntries(store, config, metrics, SystemClock(), Outputs(metrics))
    life = Lifecycle()
    started = life.observe("maintenance-event", Trigger("maintenance-event", TERMINATE, 30.0), time.time())
    drain = life.drain
    assert drain is not None
    for action in started:  # told before the writer's thread has written the drain's state
        recorder.told(moment_of(action, 1.8e9), life)
    assert recorder.history.find(drain.drain_id) is None
    assert load_entries(str(tmp_path / HISTORY_FILE)) == []
    store.apply(store.lifecycle_change(life.events.values(), drain, None, on_timeout="kill"))
    recorder.seen(life)  # what the loop does when the writer says it wrote
    opened = recorder.history.find(drain.drain_id)
    assert opened is not None
    assert opened["outcome"] is None


def test_a_drain_s_end_the_history_lost_is_written_from_the_state_file_at_start(tmp_path: Path) -> None:
    """Killed after the state file had the drain's end and before the history had it: the next start
    writes that end from the state file (its outcome, its SIGTERMed process), never leaves it open."""
    store, metrics = StateStore(str(tmp_path)), Metrics()
    config = dataclasses.replace(default_config(), state_dir=str(tmp_path))
    recorder = HistoryEntries(store, config, metrics, SystemClock(), Outputs(metrics))
    life, now = Lifecycle(), time.time()
    life.observe("maintenance-event", Trigger("maintenance-event", TERMINATE, 30.0), now)
    drain = life.drain
    assert drain is not None
    store.apply(store.lifecycle_change(life.events.values(), drain, None, on_timeout="kill"))
    recorder.seen(life)
    store.record_intents([Intent(ProcessIdentity(4_200_001, 7), "SIGTERM", "trainer")])
    life.drain_finished(Outcome.TIMED_OUT.value, now + 30)
    store.apply(store.lifecycle_change(
        life.events.values(), None, life.last_outcome, on_timeout="kill", ended=life.ended,
        ended_at=life.ended_at,
    ))  # fmt: skip
    recorder.history.settled(5.0)  # the opening entry is on disk; the end never reached it
    again = StateStore(str(tmp_path))
    restarted = HistoryEntries(again, config, metrics, SystemClock(), Outputs(metrics))
    saved = again.state
    restarted.restored(saved, Lifecycle.restored(
        saved.events, saved.drain, saved.last_outcome, ended=saved.ended_drain, ended_at=saved.ended_at
    ))  # fmt: skip
    entry = restarted.history.find(drain.drain_id)
    assert entry is not None
    assert entry["outcome"] == "timed_out"
    assert [p["pid"] for p in entry["processes"]] == [4_200_001]  # type: ignore[union-attr]
