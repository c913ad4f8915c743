"""The daemon when what it tells fails: every log line of an event's moments raising, sd_notify raising.

Signal first, then tell: a real daemon (the harness: real fake metadata server over HTTP, real watches, a
real state file) still SIGTERMs a real holder on the event, the drain ends, and each failure is counted in
tpu_watchdog_output_errors_total{output}. The failures come in through the daemon's own seams: a handler on
its logger (as a journal or log shipper that raises would), the sd_notify sender of its `Wiring`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon_harness import MAINTENANCE, DaemonHarness
from tests.support.failing_logs import every_line_raising
from tests.support.waiting import wait_for
from tests.support.workloads import Workloads
from watchdog.fake.server import FakeMetadataServer, Fault
from watchdog.surface.logs import KIND
from watchdog.surface.notify import Notifier

OUTPUT_ERRORS = "tpu_watchdog_output_errors_total"
SIGNALS = "tpu_watchdog_signals_sent_total"


class FailingKeyLines(logging.Handler):
    """Raises on every key message (event started, drain started, signal sent, drain finished...): each
    line that carries a MESSAGE_ID, as a broken journal connection would. Other lines pass."""

    def __init__(self) -> None:
        super().__init__()
        self.refused: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        kind = record.__dict__.get(KIND)
        if kind:
            self.refused.append(str(kind))
            raise RuntimeError(f"the journal refused the {kind} line")


@pytest.fixture
def failing_lines() -> Iterator[FailingKeyLines]:
    handler = FailingKeyLines()
    logger = logging.getLogger("tpu-watchdog")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def test_an_event_whose_every_key_line_raises_still_drains_and_counts_them(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path, failing_lines: FailingKeyLines
) -> None:
    holder = workloads.start("handled")
    with DaemonHarness(tmp_path / "state", fake, workloads) as harness:
        fake.set(MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE")
        harness.wait_state("drained")
        assert holder.popen.wait(timeout=10) == 0  # its SIGTERM handler ran: the signal went out
        assert harness.metric(SIGNALS, signal="SIGTERM") == 1
        assert harness.metric("tpu_watchdog_drains_total", outcome="exited") == 1
        assert harness.metric(OUTPUT_ERRORS, output="log") >= 3, failing_lines.refused
        assert harness.thread.is_alive()
    assert {"event_started", "drain_started", "signal_sent", "drain_finished"} <= set(failing_lines.refused)


def test_a_late_arrival_whose_line_raises_still_gets_its_sigterm(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path, failing_lines: FailingKeyLines
) -> None:
    """The late-arrival line is said before that process's drain starts: once, it stopped the drain."""
    with DaemonHarness(tmp_path / "state", fake, workloads) as harness:
        fake.set(MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE")
        harness.wait_state("drained")  # no holder yet: a drain of nobody
        late = workloads.start("handled")  # a restarted job opens the device while the event is on
        assert late.popen.wait(timeout=20) == 0
        assert harness.metric(SIGNALS, signal="SIGTERM") == 1
        assert harness.thread.is_alive()
    assert "late_arrival" in failing_lines.refused


def test_an_sd_notify_that_raises_stops_neither_the_loop_nor_the_drain(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path
) -> None:
    """Not an OSError (which the notifier absorbs itself): a bug in the sender, say."""

    def broken(message: str) -> bool:
        raise RuntimeError("sd_notify is broken")

    notifier = Notifier(environ={"NOTIFY_SOCKET": "/nonexistent"}, sender=broken)
    holder = workloads.start("handled")
    with DaemonHarness(tmp_path / "state", fake, workloads, notifier=notifier) as harness:
        harness.wait_metric(OUTPUT_ERRORS, 1, output="notify")  # READY=1 failed
        fake.set(MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE")
        harness.wait_state("drained")
        assert holder.popen.wait(timeout=10) == 0
        assert harness.metric(SIGNALS, signal="SIGTERM") == 1
        assert harness.thread.is_alive()


def test_a_watch_whose_every_line_raises_still_hears_the_event_and_the_daemon_drains(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path
) -> None:
    """The watch threads log in their own logger: a line there that raised once ended the watch (the
    event after it never heard), and a failed line of the watch was counted nowhere."""
    holder = workloads.start("handled")
    with (
        DaemonHarness(tmp_path / "state", fake, workloads) as harness,
        every_line_raising("tpu-watchdog", "watchdog.metadata.watch") as lines,  # once it runs
    ):
        fake.add_fault(Fault(kind="reset", path=MAINTENANCE))
        fake.expire_hanging()  # the next GET of the key is the reset one
        wait_for(lambda: lines.refused("answering again"), what="the line of the server's return")
        fake.set(MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE")
        harness.wait_state("drained")
        assert holder.popen.wait(timeout=10) == 0  # its SIGTERM handler ran: the signal went out
        assert harness.metric(SIGNALS, signal="SIGTERM") == 1
        assert all(watch.alive for watch in harness.daemon.watcher.watches)
        assert harness.thread.is_alive()
        watch_lines = lines.refused("answering again") + lines.refused(MAINTENANCE)
        assert harness.metric(OUTPUT_ERRORS, output="log") >= len(watch_lines) >= 2, watch_lines
