"""The daemon end to end in one process: each policy row, one drain per event, cancellation, dry run, hooks.

Real fake metadata server, real watches, real children holding a real device node, real signals.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from pathlib import Path

import pytest

from tests.support.daemon_harness import MAINTENANCE, PREEMPTED, DaemonHarness
from tests.support.waiting import wait_for
from tests.support.workloads import OwnScanner, Workloads
from watchdog.core.metadata_values import MaintenanceKind
from watchdog.daemon.runner import DrainReport
from watchdog.fake.server import FakeMetadataServer, Fault
from watchdog.host.holders import ScanResult

TERMINATE = "TERMINATE_ON_HOST_MAINTENANCE"
MIGRATE = "MIGRATE_ON_HOST_MAINTENANCE"
DRAINS = "tpu_watchdog_drains_total"
SIGNALS = "tpu_watchdog_signals_sent_total"


def test_no_thread_waits_for_the_stop_and_setting_it_ends_the_daemon(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    """Setting the stop wakes the loop (asleep until its next due time, 30 s idle) in the setter's own
    thread (`core/stop.py`): no thread of the daemon sits waiting for it. (That it ends the hanging GETs
    at once: tests/metadata/test_watch.py.)"""
    before = set(threading.enumerate())
    harness = DaemonHarness(state_dir, fake, workloads)
    with harness:
        wait_for(lambda: fake.store.waiting() == 3, what="three hanging GETs")
        started = {t.name for t in set(threading.enumerate()) - before}
        assert {"daemon under test", "holder-index"} <= started
        assert not {"stop-waker", "stop watches"} & started, started
    # Leaving the block set the stop, and the loop returned (else: "did not stop within 10 s").


def test_a_drain_runs_on_the_loop_with_no_thread_of_its_own(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    """One loop: the daemon's loop drives the drain (its processes' pidfds on the loop's poll, its scans
    made by the scanning thread, a wave held for its write-ahead rather than waited for); no thread is
    started for it, and the SIGKILL at the deadline comes from the loop too."""
    stubborn = workloads.start("ignore")
    before = set(threading.enumerate())
    with DaemonHarness(state_dir, fake, workloads, maintenance_grace=2.0) as harness:
        fake.set(MAINTENANCE, TERMINATE)
        wait_for(lambda: harness.metric(SIGNALS, signal="SIGTERM") == 1, what="the SIGTERM")
        assert harness.daemon.runner.running
        started = {t.name for t in set(threading.enumerate()) - before}
        assert "drain" not in started, started
        assert stubborn.popen.wait(timeout=10) == -signal.SIGKILL
        harness.wait_metric(DRAINS, 1, outcome="timed_out")


def test_the_first_sigterm_goes_before_the_first_line_of_its_event(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    """Signal first, then tell: what a step has to say (its event started, its drain started) waits while
    the wave it led to is held for its write-ahead. Ground truth from the kernel: the holder blocks
    SIGTERM, so once sent it stays pending, and the first line of the event looks whether it is."""
    holder = workloads.start("block")
    pending_at_first_line: list[bool] = []

    class FirstLine(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("event started") and not pending_at_first_line:
                pending_at_first_line.append(holder.sigterm_pending())

    probe = FirstLine()
    logging.getLogger("tpu-watchdog").addHandler(probe)
    try:
        with DaemonHarness(state_dir, fake, workloads, maintenance_grace=1.0) as harness:
            wait_for(lambda: harness.daemon.indexed.holders, what="the index: the first wave starts there")
            fake.set(MAINTENANCE, TERMINATE)
            wait_for(lambda: pending_at_first_line, what="the event's first line")
            assert holder.popen.wait(timeout=10) == -signal.SIGKILL  # blocked SIGTERM: killed at the deadline
            harness.wait_metric(DRAINS, 1, outcome="timed_out")
    finally:
        logging.getLogger("tpu-watchdog").removeHandler(probe)
    assert pending_at_first_line == [True], "the event was told before its SIGTERM went"


def test_terminate_drains_the_holders_then_clearing_returns_to_idle(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    trainer = workloads.start("handled")
    with DaemonHarness(state_dir, fake, workloads) as harness:
        assert harness.daemon.view.readiness()[0]
        fake.set(MAINTENANCE, TERMINATE)
        harness.wait_state("drained")
        assert trainer.popen.wait(timeout=10) == 0
        assert harness.metric(DRAINS, outcome="exited") == 1
        assert harness.metric(SIGNALS, signal="SIGTERM") == 1
        assert harness.metric(SIGNALS, signal="SIGKILL") == 0
        ready, reason = harness.daemon.view.readiness()
        assert not ready
        assert TERMINATE in reason
        fake.set(MAINTENANCE, "NONE")
        harness.wait_state("idle")
        assert harness.daemon.view.readiness()[0]


def test_holders_by_sigterm_disposition_in_metrics_and_status(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    """Real children that catch, ignore, or leave SIGTERM at its default: counted, shown, none signalled."""
    modes = (("handled", "caught"), ("ignore", "ignored"), ("default", "default"))
    kinds = {workloads.start(mode).popen.pid: kind for mode, kind in modes}
    with DaemonHarness(state_dir, fake, workloads) as harness:
        for kind in kinds.values():
            harness.wait_metric("tpu_watchdog_device_holders_by_sigterm", 1, disposition=kind)
        holders = harness.daemon.view.status()["holders"]
        assert {h["pid"]: h["sigterm"] for h in holders} == kinds
        assert harness.metric(SIGNALS, signal="SIGTERM") == 0
    assert all(child.alive() for child in workloads.children)


def test_migrate_sends_nothing_by_default(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    workloads.start("report")
    with DaemonHarness(state_dir, fake, workloads) as harness:
        fake.set(MAINTENANCE, MIGRATE)
        wait_for(
            lambda: (
                harness.daemon.view.values["maintenance-event"].kind  # type: ignore[union-attr]
                is MaintenanceKind.MIGRATE_ON_HOST_MAINTENANCE
            ),
            what="the daemon to see MIGRATE",
        )
        # The value is handled where it arrives: had the policy wanted a drain, it would have started.
        assert harness.daemon.lifecycle.drain is None
        assert harness.state == "idle"
        assert harness.metric(SIGNALS, signal="SIGTERM") == 0


def test_migrate_can_be_set_to_drain(fake: FakeMetadataServer, workloads: Workloads, state_dir: Path) -> None:
    trainer = workloads.start("handled")
    with DaemonHarness(state_dir, fake, workloads, migrate_action="drain") as harness:
        fake.set(MAINTENANCE, MIGRATE)
        harness.wait_state("drained")
        assert trainer.popen.wait(timeout=10) == 0


def test_an_unknown_well_formed_value_drains(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    trainer = workloads.start("handled")
    with DaemonHarness(state_dir, fake, workloads) as harness:
        fake.set(MAINTENANCE, "SHUTDOWN_ON_HOST_MAINTENANCE")
        harness.wait_state("drained")
        assert trainer.popen.wait(timeout=10) == 0
        assert harness.metric("tpu_watchdog_maintenance_event", value="UNKNOWN") == 1
    assert "does not know" in caplog.text


@pytest.mark.parametrize(
    "body", ["terminate_on_host_maintenance", f" {TERMINATE}", f"{TERMINATE}\x00", "A\nB"]
)
def test_a_malformed_value_is_an_error_and_never_signals(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path, body: str
) -> None:
    workloads.start("report")
    with DaemonHarness(state_dir, fake, workloads) as harness:
        fake.set(MAINTENANCE, body)
        harness.wait_metric(
            "tpu_watchdog_metadata_errors_total", 1, endpoint="maintenance-event", kind="malformed_value"
        )
        assert harness.daemon.lifecycle.drain is None
        assert harness.metric(SIGNALS, signal="SIGTERM") == 0


def test_preemption_uses_the_short_grace_and_kills_what_ignores_sigterm(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    stubborn = workloads.start("ignore")
    with DaemonHarness(state_dir, fake, workloads, preemption_grace=1.5) as harness:
        fake.set(PREEMPTED, "TRUE")
        harness.wait_state("timed_out")
        assert stubborn.popen.wait(timeout=10) == -9
        assert harness.metric(DRAINS, outcome="timed_out") == 1
        assert harness.metric(SIGNALS, signal="SIGKILL") == 1
        record = harness.daemon.last_record
        assert record is not None
        assert record.ended is not None
        assert record.ended >= record.deadline  # not before the deadline (the event's first sight + 1.5 s)
        assert abs(record.deadline - record.started - 1.5) < 0.01  # the drain starts when its event did


def test_one_drain_per_event_across_a_watch_reconnect(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    workloads.start("handled")
    with DaemonHarness(state_dir, fake, workloads) as harness:
        fake.set(MAINTENANCE, TERMINATE)
        harness.wait_state("drained")
        newcomer = workloads.start("report")  # a supervisor restarted the job
        fake.add_fault(Fault(kind="reset", count=2, path=MAINTENANCE))
        fake.expire_hanging()  # the watch's next request meets the reset now
        wait_for(lambda: any(r.note == "fault:reset" for r in fake.requests()), what="the watch to be reset")
        harness.wait_metric(
            "tpu_watchdog_metadata_errors_total", 1, endpoint="maintenance-event", kind="connection_reset"
        )
        start = len(fake.requests())
        wait_for(
            lambda: any(r.path.endswith(MAINTENANCE) and r.status == 200 for r in fake.requests()[start:]),
            what="the watch to read the value again",
        )
        # The reconnect drained nothing again; the restarted job got its one SIGTERM, as a late arrival.
        assert harness.metric(DRAINS, outcome="exited") == 1
        assert newcomer.expect("term") == "term"
        harness.wait_metric(SIGNALS, 2, signal="SIGTERM")
        assert harness.metric(SIGNALS, signal="SIGTERM") == 2
        assert newcomer.alive()
        wait_for(
            lambda: (r := harness.daemon.view.record) is not None and r.late, what="the late drain's record"
        )
        record = harness.daemon.view.record
        assert record is not None
        assert record.processes[newcomer.identity].late_arrival


def test_a_new_event_after_the_value_went_back_to_none_drains_again(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    workloads.start("handled")
    with DaemonHarness(state_dir, fake, workloads) as harness:
        fake.set(MAINTENANCE, TERMINATE)
        harness.wait_state("drained")
        fake.set(MAINTENANCE, "NONE")
        harness.wait_state("idle")
        second = workloads.start("handled")
        fake.set(MAINTENANCE, TERMINATE)
        harness.wait_metric(DRAINS, 2, outcome="exited")
        assert second.popen.wait(timeout=10) == 0


def test_clearing_mid_drain_cancels_it_without_sigkill(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    stubborn = workloads.start("ignore")
    with DaemonHarness(state_dir, fake, workloads, maintenance_grace=60.0) as harness:
        fake.set(MAINTENANCE, TERMINATE)
        harness.wait_metric(SIGNALS, 1, signal="SIGTERM")
        fake.set(MAINTENANCE, "NONE")
        harness.wait_metric(DRAINS, 1, outcome="cancelled")
        harness.wait_state("idle")
        assert harness.metric(SIGNALS, signal="SIGKILL") == 0
        assert stubborn.alive()


def test_a_preemption_during_a_maintenance_drain_brings_the_deadline_closer(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    stubborn = workloads.start("ignore")
    with DaemonHarness(state_dir, fake, workloads, maintenance_grace=300.0, preemption_grace=1.0) as harness:
        fake.set(MAINTENANCE, TERMINATE)
        harness.wait_metric(SIGNALS, 1, signal="SIGTERM")
        fake.set(PREEMPTED, "TRUE")
        harness.wait_state("timed_out")
        assert stubborn.popen.wait(timeout=10) == -9
        assert harness.metric(SIGNALS, signal="SIGTERM") == 1  # never twice


def test_dry_run_decides_everything_and_sends_nothing(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    bystander = workloads.start("report")
    with DaemonHarness(state_dir, fake, workloads, dry_run=True, maintenance_grace=1.0) as harness:
        fake.set(MAINTENANCE, TERMINATE)
        harness.wait_state("drained")  # a rehearsal's timed_out is never the daemon's state
        record = harness.daemon.last_record
        assert record is not None
        assert record.dry_run
        assert harness.daemon.lifecycle.last_outcome == "timed_out"
        assert bystander.identity in record.processes
        assert harness.daemon.view.status()["dry_run"]
        assert harness.metric(SIGNALS, signal="SIGTERM") == 0  # nothing sent, nothing counted
        assert harness.metric(SIGNALS, signal="SIGKILL") == 0
    assert bystander.alive()
    bystander.popen.kill()
    bystander.popen.wait(timeout=10)
    with pytest.raises(AssertionError, match="said nothing"):
        bystander.expect("term", timeout=0.2)  # the pipe closed without a word: no signal ever arrived


def test_hooks_that_hang_or_fail_never_delay_the_drain(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path, tmp_path: Path
) -> None:
    trainer = workloads.start("handled")
    told = tmp_path / "drain-end.env"
    record_env = f"import os; open({str(told)!r}, 'w').write(os.environ['TPU_WATCHDOG_OUTCOME'])"
    with DaemonHarness(
        state_dir,
        fake,
        workloads,
        hook_on_event_start=(sys.executable, "-c", "import time; time.sleep(60)"),
        hook_on_event_clear=("/nonexistent/hook",),
        hook_on_drain_end=(sys.executable, "-c", record_env),
        hook_timeout=30.0,
    ) as harness:
        fake.set(MAINTENANCE, TERMINATE)
        harness.wait_state("drained", timeout=15)  # long before the hanging hook's 30 s timeout
        assert trainer.popen.wait(timeout=10) == 0
        wait_for(lambda: told.exists() and told.read_text() == "exited", what="the drain-end hook")
        fake.set(MAINTENANCE, "NONE")
        harness.wait_state("idle")  # a missing hook executable is logged, nothing more


class FlakyScanner:
    """The test's own scanner, failing its first `failures` scans: a /proc that misbehaves for a while."""

    def __init__(self, inner: OwnScanner, failures: int) -> None:
        self.inner, self.failures = inner, failures

    def scan(self) -> ScanResult:
        if self.failures > 0:
            self.failures -= 1
            raise OSError("procfs misbehaves")
        return self.inner.scan()


def test_failing_scans_neither_stop_the_daemon_nor_skip_the_drain(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    trainer = workloads.start("handled")
    scanner = FlakyScanner(OwnScanner(workloads), failures=4)  # more than one drain attempt tries
    with DaemonHarness(state_dir, fake, workloads, scanner=scanner) as harness:
        fake.set(MAINTENANCE, TERMINATE)
        harness.wait_state("drained")
        assert trainer.popen.wait(timeout=10) == 0
        assert harness.thread.is_alive()
        assert scanner.failures == 0
    assert "procfs misbehaves" in caplog.text
    # The retried drain's state was on disk: its first signal did not wait for a write nobody makes.
    assert "was not written" not in caplog.text


def test_a_drain_starts_only_after_the_write_of_its_own_state_is_queued(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    """The state file knows a drain before any of its signals because of the writer's one queue: the loop
    queues the drain's state, with its first wave's intents, and only then starts the drain. The other way
    round, the drain's first write-ahead could come first, and the drain's write (a new drain: no signals
    yet) would drop what became of them."""
    child = workloads.start("handled")
    with DaemonHarness(state_dir, fake, workloads) as harness:
        daemon, steps = harness.daemon, []
        save, start = daemon.runner.writer.save, daemon.runner.start

        def saving(change: object, intents: object = ()) -> int:
            steps.append("save")
            return save(change, intents)  # type: ignore[arg-type]

        def starting(order: object) -> list[DrainReport]:
            steps.append("start")
            return start(order)  # type: ignore[arg-type]

        daemon.runner.writer.save, daemon.runner.start = saving, starting  # type: ignore[method-assign]
        fake.set(MAINTENANCE, TERMINATE)
        assert child.popen.wait(timeout=10) == 0
        harness.wait_state("drained")
        assert steps[:2] == ["save", "start"], steps
        intent = daemon.store.state.find(child.identity, 15)
        assert intent is not None
        assert intent.result == "sent"
