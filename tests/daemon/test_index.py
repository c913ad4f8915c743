"""The warm holder index: refreshed in its own thread at start and on request, never while paused."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import pytest

from tests.support.failing_logs import every_line_raising
from tests.support.simclock import SimulatedClock
from tests.support.waiting import wait_for
from tests.support.workloads import OwnScanner, Workloads
from watchdog.core.vocabulary import Output
from watchdog.daemon.index import HolderIndex, HoldersScanned
from watchdog.daemon.outputs import Outputs
from watchdog.host.holders import ScanResult
from watchdog.surface.metrics import Metrics


class CountingScanner(OwnScanner):
    """The real scanner on the test's processes, counting its scans (and failing when told to)."""

    def __init__(self, workloads: Workloads) -> None:
        super().__init__(workloads)
        self.scans = 0
        self.fail = False

    def scan(self) -> ScanResult:
        failing = self.fail  # decided before the count a test waits on
        self.scans += 1
        if failing:
            raise OSError("a passing /proc error")
        return super().scan()


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def outputs() -> Outputs:
    return Outputs(Metrics())


def test_the_index_is_filled_at_start_and_refreshed_on_request(
    workloads: Workloads, stop: threading.Event, outputs: Outputs
) -> None:
    first = workloads.start("report")
    published: queue.Queue[HoldersScanned] = queue.Queue()
    index = HolderIndex(
        OwnScanner(workloads), published.put, lambda: False, stop, interval=3600, outputs=outputs
    )
    index.start()
    scan = published.get(timeout=10)
    assert [h.identity for h in scan.holders] == [first.identity]
    assert first.identity.pid in scan.pids  # the PIDs it saw: a drain looks at the others alone
    second = workloads.start("report")
    index.refresh_soon()  # a drain ended: do not wait an hour
    assert {h.identity for h in published.get(timeout=10).holders} == {first.identity, second.identity}


def test_nothing_is_scanned_or_published_while_paused(
    workloads: Workloads, stop: threading.Event, outputs: Outputs
) -> None:
    workloads.start("report")
    scanner = CountingScanner(workloads)
    published: queue.Queue[HoldersScanned] = queue.Queue()
    paused = threading.Event()
    paused.set()
    index = HolderIndex(scanner, published.put, paused.is_set, stop, interval=0.05, outputs=outputs)
    index.start()
    with pytest.raises(queue.Empty):
        published.get(timeout=0.5)  # a negative check: ten refresh intervals, nothing published
    assert scanner.scans == 0
    paused.clear()
    assert len(published.get(timeout=10).holders) == 1


def test_a_failed_refresh_is_logged_and_the_next_one_publishes(
    workloads: Workloads, stop: threading.Event, outputs: Outputs, caplog: pytest.LogCaptureFixture
) -> None:
    workloads.start("report")
    scanner = CountingScanner(workloads)
    scanner.fail = True
    published: queue.Queue[HoldersScanned] = queue.Queue()
    index = HolderIndex(scanner, published.put, lambda: False, stop, interval=3600, outputs=outputs)
    index.start()
    wait_for(lambda: scanner.scans >= 1, what="the first refresh")
    scanner.fail = False
    index.refresh_soon()
    assert len(published.get(timeout=10).holders) == 1
    assert scanner.scans == 2  # the failed one published nothing
    assert "refreshing the holder index failed" in caplog.text


def test_a_failed_refresh_whose_line_raises_is_counted_and_the_refreshes_go_on(
    workloads: Workloads, stop: threading.Event, outputs: Outputs
) -> None:
    """The line of a failed refresh, raising (a broken journal), once ended the index thread: every drain
    after it started from a stale index."""
    workloads.start("report")
    scanner = CountingScanner(workloads)
    scanner.fail = True
    published: queue.Queue[HoldersScanned] = queue.Queue()
    index = HolderIndex(scanner, published.put, lambda: False, stop, interval=3600, outputs=outputs)
    with every_line_raising("tpu-watchdog") as lines:
        index.start()
        wait_for(lambda: lines.refused("refreshing the holder index failed"), what="the refused line")
        scanner.fail = False
        index.refresh_soon()
        assert len(published.get(timeout=10).holders) == 1
    errors = outputs.metrics.registry.get_sample_value(
        "tpu_watchdog_output_errors_total", {"output": Output.LOG.value}
    )
    assert errors is not None
    assert errors >= 1


def test_the_refreshes_fall_between_the_watches_answers(
    workloads: Workloads, stop: threading.Event, outputs: Outputs
) -> None:
    """The hanging GETs answer every interval from the start, all at once; the refreshes come half an
    interval after them (at once, then half an interval later, then every interval), so an idle daemon's
    threads do not all wake, and contend for the GIL, at the same instant."""
    clock = SimulatedClock()
    began = clock.monotonic()
    at: list[float] = []
    index = HolderIndex(
        OwnScanner(workloads), lambda _: at.append(clock.monotonic() - began), lambda: False, stop,
        interval=60.0, outputs=outputs, clock=clock,
    )  # fmt: skip
    index.start()
    wait_for(lambda: len(at) >= 4, what="four refreshes")
    assert at[:4] == [0.0, 30.0, 90.0, 150.0]


def test_a_scan_asked_for_is_made_and_published_while_paused_failed_or_not(
    workloads: Workloads, stop: threading.Event, outputs: Outputs
) -> None:
    """The scanning thread makes a drain's scans while the idle refresh is paused (an event is on): each
    answer carries the ticket it answers, and a failed scan is answered too (the drain waits for it)."""
    holder = workloads.start("report")
    scanner = CountingScanner(workloads)
    published: queue.Queue[HoldersScanned] = queue.Queue()
    index = HolderIndex(scanner, published.put, lambda: True, stop, interval=3600, outputs=outputs)
    index.start()
    first = index.scan_now()
    scan = published.get(timeout=10)
    assert (scan.ticket, scan.error) == (first, "")
    assert [h.identity for h in scan.holders] == [holder.identity]
    scanner.fail = True
    second = index.scan_now()
    failed = published.get(timeout=10)
    assert failed.ticket == second > first
    assert "a passing /proc error" in failed.error
    assert failed.holders == ()
    assert published.empty()  # paused: no refresh of its own was published
