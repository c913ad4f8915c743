"""The daemon under every fault the metadata server can show (injected through the fake, over real HTTP).

For each fault: the daemon stays up, signals nothing, counts the error by kind, stays healthy within the
documented tolerance, recovers within the backoff cap once the fault clears, and a real event afterwards
drains exactly once. The holder is a real process that reports every SIGTERM it receives, so "exactly once"
is counted where it matters. docs/reliability.md has the table; `-s` prints each case's figures.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon_harness import MAINTENANCE, PREEMPTED, UPCOMING, DaemonHarness
from tests.support.ports import port_held
from tests.support.readable import readable
from tests.support.waiting import wait_for
from tests.support.workloads import Child, Workloads
from watchdog.fake.server import FakeMetadataServer, Fault
from watchdog.metadata.watch import WatchMode

STORM = 100_000  # "every request until cleared"
ERRORS = "tpu_watchdog_metadata_errors_total"
SIGNALS = "tpu_watchdog_signals_sent_total"
DRAINS = "tpu_watchdog_drains_total"
ENDPOINTS = {MAINTENANCE: "maintenance-event", PREEMPTED: "preempted", UPCOMING: "upcoming-maintenance"}
BACKOFF_CAP = 0.2  # the harness's backoff cap
IN_FLIGHT = 8.0  # the longest a faulted request still in flight can take after the fault is cleared


@pytest.fixture
def harness(fake: FakeMetadataServer, workloads: Workloads, state_dir: Path) -> Iterator[DaemonHarness]:
    with DaemonHarness(state_dir, fake, workloads, on_timeout="kill") as running:
        yield running


@pytest.fixture
def holder(workloads: Workloads) -> Child:
    """A training job that says "term" for each SIGTERM and never exits by itself (SIGKILL ends it)."""
    return workloads.start("report")


def said_nothing(child: Child) -> bool:
    return not readable([child.out])


def errors(harness: DaemonHarness, kind: str) -> float:
    return sum(harness.metric(ERRORS, endpoint=e, kind=kind) for e in ENDPOINTS.values())


def quiet_and_healthy(harness: DaemonHarness, holder: Child) -> None:
    """The promises while a fault lasts: up, idle, nothing signalled, healthy (within the tolerance)."""
    assert harness.thread.is_alive()
    assert harness.state == "idle"
    assert harness.metric(SIGNALS, signal="SIGTERM") == 0
    assert said_nothing(holder)
    assert harness.daemon.view.health() == (True, "ok")


def failing(harness: DaemonHarness) -> set[str]:
    return {s.key for s in harness.daemon.watcher.statuses() if s.last_error is not None}


def recovered(harness: DaemonHarness, keys: set[str], cleared_at: float) -> bool:
    """Every key that was failing has answered well since the fault cleared (the others are in a healthy
    hanging GET, which answers only when its value changes or its timeout ends)."""
    return all(
        s.last_error is None and (s.last_success or 0) > cleared_at and s.mode is not WatchMode.UNSUPPORTED
        for s in harness.daemon.watcher.statuses()
        if s.key in keys
    )


def recover_then_drain_once(harness: DaemonHarness, holder: Child, fake: FakeMetadataServer) -> float:
    """Clear the faults; the watches answer again within the backoff cap (plus a request in flight); a
    real preemption then drains once: one SIGTERM received, SIGKILL at the deadline. Returns the recovery
    time in seconds."""
    keys = failing(harness)
    fake.faults.clear()
    cleared = time.time()
    wait_for(lambda: recovered(harness, keys, cleared), timeout=BACKOFF_CAP + IN_FLIGHT, what="recovery")
    recovery = time.time() - cleared
    fake.set(PREEMPTED, "TRUE")
    holder.expect("term")
    harness.wait_state("timed_out")
    assert holder.popen.wait(timeout=10) == -9  # it ignores SIGTERM (reports it): SIGKILL at the deadline
    os.set_blocking(holder.out, False)
    rest = holder._buffer + b"".join(iter(lambda: _read(holder.out), b""))
    assert b"term" not in rest, "a second SIGTERM for the same event"
    assert harness.metric(SIGNALS, signal="SIGTERM") == 1
    assert harness.metric(DRAINS, outcome="timed_out") == 1
    assert sum(harness.metric(DRAINS, outcome=o) for o in ("exited", "cancelled", "timed_out")) == 1
    return recovery


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 4096)
    except BlockingIOError:
        return b""


def report(name: str, **figures: object) -> None:
    print(  # noqa: T201 - what each recovery took, shown with -s
        f"\nFAULT {name}: " + ", ".join(f"{k}={v}" for k, v in figures.items())
    )


# -- faults on every request -------------------------------------------------------------------------------

HTTP_FAULTS = [
    pytest.param(Fault("status", STORM, status=503), "http_5xx", 5, id="503-storm"),
    pytest.param(Fault("status", STORM, status=500), "http_5xx", 5, id="500"),
    pytest.param(Fault("status", STORM, status=429), "http_429", 5, id="429"),
    pytest.param(Fault("status", STORM, status=403), "http_403", 5, id="403"),
    pytest.param(Fault("reset", STORM), "connection_reset", 5, id="reset"),
    # The harness reads a plain GET for 2 s, a hanging one for its 2 s timeout + 2 s margin.
    pytest.param(Fault("delay", STORM, seconds=6.0), "timeout", 1, id="hang-past-client-timeout"),
    # ~1 byte a second: every read is within the 2 s read timeout, the whole body is not.
    pytest.param(Fault("trickle", STORM, seconds=6.0), "timeout", 1, id="trickling-body"),
    pytest.param(Fault("garbage", STORM), "body_not_text", 5, id="binary-body"),
    pytest.param(Fault("oversized", STORM), "body_too_large", 5, id="2-MiB-body"),
    pytest.param(Fault("no_flavor", STORM), "missing_flavor", 5, id="no-Metadata-Flavor"),
]


@pytest.mark.parametrize(("fault", "kind", "at_least"), HTTP_FAULTS)
def test_a_fault_on_every_request_is_counted_signals_nothing_and_the_next_event_drains_once(
    fake: FakeMetadataServer, holder: Child, harness: DaemonHarness, fault: Fault, kind: str, at_least: int
) -> None:
    fake.add_fault(fault)
    fake.expire_hanging()  # the next requests meet the fault now, not when their hanging GETs time out
    wait_for(
        lambda: all(harness.metric(ERRORS, endpoint=e, kind=kind) >= at_least for e in ENDPOINTS.values()),
        timeout=30,
        what=f"{at_least}+ {kind} errors on every key",
    )
    quiet_and_healthy(harness, holder)
    counted = errors(harness, kind)
    recovery = recover_then_drain_once(harness, holder, fake)
    report(fault.kind, kind=kind, errors_counted=int(counted), recovered_s=f"{recovery:.2f}")


def test_garbage_values_are_errors_never_events(
    fake: FakeMetadataServer, holder: Child, harness: DaemonHarness
) -> None:
    fake.set(MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE\x00 ; rm -rf /")  # not one token: malformed
    fake.set(PREEMPTED, "MAYBE")
    fake.set(UPCOMING, '{"window_start_time": "soon"')  # truncated JSON
    wait_for(
        lambda: all(
            harness.metric(ERRORS, endpoint=e, kind="malformed_value") >= 1 for e in ENDPOINTS.values()
        ),
        what="a malformed_value error on every key",
    )
    quiet_and_healthy(harness, holder)
    assert harness.daemon.view.values[ENDPOINTS[PREEMPTED]].preempted is False  # type: ignore[union-attr]
    for key in (MAINTENANCE, UPCOMING):
        fake.reset(key)
    fake.set(PREEMPTED, "FALSE")
    recovery = recover_then_drain_once(harness, holder, fake)
    report("garbage values", kind="malformed_value", recovered_s=f"{recovery:.2f}")


def test_etag_changes_without_value_changes_are_not_events(
    fake: FakeMetadataServer, holder: Child, harness: DaemonHarness
) -> None:
    before = len(fake.requests())
    fake.add_fault(Fault("etag", STORM))
    fake.expire_hanging()
    wait_for(lambda: len(fake.requests()) - before >= 30, what="30 answers with fresh ETags")
    quiet_and_healthy(harness, holder)
    assert sum(s.changes for s in harness.daemon.watcher.statuses()) == len(ENDPOINTS)  # the first values
    assert errors(harness, "other") == 0
    recovery = recover_then_drain_once(harness, holder, fake)
    report("etag churn", requests=len(fake.requests()) - before, recovered_s=f"{recovery:.2f}")


@pytest.mark.parametrize("key", list(ENDPOINTS))
def test_a_404_on_one_key_is_counted_and_passes(
    fake: FakeMetadataServer, holder: Child, harness: DaemonHarness, key: str
) -> None:
    fake.add_fault(Fault("status", STORM, status=404, path=key))
    fake.expire_hanging()
    wait_for(lambda: harness.metric(ERRORS, endpoint=ENDPOINTS[key], kind="http_404") >= 1, what="a 404")
    if key == UPCOMING:  # "not on this machine": asked again now and then, not every backoff
        watch = next(w for w in harness.daemon.watcher.watches if w.key == UPCOMING)
        wait_for(lambda: watch.status().mode is WatchMode.UNSUPPORTED, what="unsupported")
    wait_for(lambda: len([r for r in fake.requests() if r.path == key and r.status == 404]) >= 3)
    quiet_and_healthy(harness, holder)
    recovery = recover_then_drain_once(harness, holder, fake)
    report(f"404 on {key}", recovered_s=f"{recovery:.2f}")


def test_a_404_during_an_event_does_not_cancel_its_drain(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    """The 404 is a hiccup when the key answered before: the event and its drain stand."""
    job = workloads.start("gate")
    with DaemonHarness(
        state_dir, fake, workloads, maintenance_grace=60.0, drain_when_ongoing=True
    ) as harness:
        fake.set(UPCOMING, {"maintenance_status": "ONGOING", "type": "SCHEDULED"})
        job.expect("term")
        fake.add_fault(Fault("status", STORM, status=404, path=UPCOMING))
        fake.expire_hanging()
        wait_for(lambda: harness.metric(ERRORS, endpoint="upcoming-maintenance", kind="http_404") >= 1)
        wait_for(lambda: len([r for r in fake.requests() if r.status == 404]) >= 3, what="rechecks")
        assert harness.state == "draining"
        assert harness.daemon.lifecycle.drain is not None
        job.open_gate()
        harness.wait_state("drained")
        assert harness.metric(DRAINS, outcome="exited") == 1


def test_a_404_on_upcoming_maintenance_clears_the_window_it_announced(
    fake: FakeMetadataServer, harness: DaemonHarness
) -> None:
    """A window no longer announced leaves the metrics, /status and the daemon's values; it comes back
    with the key."""
    start, end = "2031-01-01T10:00:00Z", "2031-01-01T12:00:00Z"
    window = {"window_start_time": start, "latest_window_start_time": start, "window_end_time": end,
              "maintenance_status": "PENDING", "type": "SCHEDULED", "can_reschedule": True}  # fmt: skip
    start_metric = "tpu_watchdog_upcoming_maintenance_window_start_timestamp_seconds"
    fake.set(UPCOMING, window)
    wait_for(lambda: harness.metric(start_metric) == 1925028000.0, what="the window in the metrics")

    def shown() -> object:
        return harness.daemon.view.status()["metadata"][UPCOMING]["value"]

    assert "2031-01-01" in str(shown())
    fake.add_fault(Fault("status", STORM, status=404, path=UPCOMING))
    fake.expire_hanging()
    wait_for(lambda: math.isnan(harness.metric(start_metric)), what="the window gone from the metrics")
    assert math.isnan(harness.metric("tpu_watchdog_upcoming_maintenance_window_end_timestamp_seconds"))
    assert "upcoming-maintenance" not in harness.daemon.view.values
    assert shown() is None
    fake.faults.clear()
    wait_for(lambda: harness.metric(start_metric) == 1925028000.0, what="the window back")
    assert "2031-01-01" in str(shown())


# -- the server goes away ----------------------------------------------------------------------------------


def test_metadata_server_down_for_30_s(
    fake: FakeMetadataServer, holder: Child, harness: DaemonHarness
) -> None:
    address = fake.address
    fake.stop()
    with port_held(address):  # refused, never another test's fake on the freed port
        down_since = time.monotonic()
        wait_for(lambda: errors(harness, "connection_refused") >= 3, what="connection refused")
        while time.monotonic() - down_since < 30.0:  # the 30 s, checked all along
            quiet_and_healthy(harness, holder)
            time.sleep(0.5)  # pacing the checks, not synchronising: every iteration asserts
        refused = errors(harness, "connection_refused")
    with FakeMetadataServer(listen=address) as back:
        recovery = recover_then_drain_once(harness, holder, back)
    report("down 30 s", kind="connection_refused", errors_counted=int(refused), recovered_s=f"{recovery:.2f}")


# -- health: honest, after the documented tolerance -------------------------------------------------------


def test_healthz_fails_only_after_the_tolerance_and_recovers(
    fake: FakeMetadataServer, holder: Child, harness: DaemonHarness
) -> None:
    view = harness.daemon.view
    view.metadata_tolerance = 3.0
    fake.add_fault(Fault("status", STORM, status=503))
    fake.expire_hanging()  # the last good answers, now; then only 503s
    wait_for(lambda: failing(harness) == set(ENDPOINTS), what="503s on every key")
    # The storm began, for the daemon, at the oldest of the keys' last good answers: it may precede the
    # fault by a moment (a key that had just been answered when the fault came).
    began = min(s.last_success or 0.0 for s in harness.daemon.watcher.statuses())
    assert view.health() == (True, "ok")  # a storm shorter than the tolerance is weather
    _, reason = wait_for(lambda: (lambda h: h if not h[0] else None)(view.health()), timeout=20)
    assert time.time() - began >= 3.0
    assert "no good answer from instance/" in reason
    assert "tolerance 3 s" in reason
    assert "http_5xx" in reason
    assert view.liveness() == (True, "ok")  # a restart would not fix the metadata server
    assert harness.metric(SIGNALS, signal="SIGTERM") == 0
    recover_then_drain_once(harness, holder, fake)
    assert view.health() == (True, "ok")
