"""How long the loop sleeps: until the earliest due time of its time-based decisions; one kept on the wall
clock is looked at again every LOOP_CEILING.

A real daemon (real fake metadata server, real state file) driven one turn at a time on a fake clock: each
turn runs what is due (`_timers`), then asks how long the loop may wait for its next message (`_sleep`).
"""

from __future__ import annotations

import datetime
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon_harness import MAINTENANCE, UPCOMING, DaemonHarness
from tests.support.workloads import OwnScanner, Workloads
from watchdog.core.metadata_values import parse_maintenance_event, parse_upcoming_maintenance
from watchdog.daemon.departures import DEPARTURE_CHECK
from watchdog.daemon.device_watch import DEVICE_CHECK
from watchdog.daemon.index import HoldersScanned
from watchdog.daemon.loop import LOOP_CEILING, Daemon
from watchdog.daemon.systemd import READY_WITHIN
from watchdog.fake.server import FakeMetadataServer
from watchdog.metadata.watch import ValueChanged
from watchdog.surface.notify import Notifier


class FakeClock:
    def __init__(self) -> None:
        self.mono, self.epoch = 1000.0, 1_800_000_000.0  # whole seconds: window times are written in ms

    def monotonic(self) -> float:
        return self.mono

    def wall(self) -> float:
        return self.epoch

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.epoch += seconds

    def spawn(self, target: Callable[[], None], name: str) -> threading.Thread:
        """The state writer's thread (the loop is turned by hand: nothing else is spawned)."""
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        return thread


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def build(fake: FakeMetadataServer, workloads: Workloads, state_dir: Path, clock: FakeClock) -> Iterator[Any]:
    """A daemon built, never run: the test turns its loop by hand."""
    built: list[DaemonHarness] = []

    def make(**overrides: Any) -> Daemon:
        harness = DaemonHarness(state_dir, fake, workloads, wiring={"clock": clock}, **overrides)
        built.append(harness)
        return harness.daemon

    yield make
    for harness in built:
        harness.stop.set()
        harness.transport.close()


def turn(daemon: Daemon, clock: FakeClock) -> float:
    """One turn of the loop with no message: what is due, then how long it may sleep."""
    daemon._timers(clock.monotonic())
    return daemon._sleep()


def window_in(clock: FakeClock, seconds: float) -> ValueChanged:
    start = datetime.datetime.fromtimestamp(clock.wall() + seconds, datetime.timezone.utc)
    body = json.dumps({"window_start_time": start.isoformat(), "maintenance_status": "PENDING",
                       "type": "SCHEDULED"})  # fmt: skip
    return ValueChanged(UPCOMING, parse_upcoming_maintenance(body), clock.wall())


def device_check_in(daemon: Daemon, clock: FakeClock) -> float:
    assert daemon.devices.next_due is not None
    return daemon.devices.next_due - clock.monotonic()


def test_idle_it_sleeps_until_ready_is_due_then_until_the_device_check(build: Any, clock: FakeClock) -> None:
    daemon = build()
    clock.advance(4.0)
    assert turn(daemon, clock) == pytest.approx(READY_WITHIN - 4.0)  # READY=1 goes then, answered or not
    clock.advance(READY_WITHIN - 4.0)
    # Nothing else due: only messages and the device check wake it, no ceiling.
    assert turn(daemon, clock) == pytest.approx(device_check_in(daemon, clock))
    assert device_check_in(daemon, clock) > LOOP_CEILING
    clock.advance(device_check_in(daemon, clock))
    assert turn(daemon, clock) == pytest.approx(DEVICE_CHECK)


def test_a_due_time_on_the_wall_clock_is_looked_at_again_every_ceiling(build: Any, clock: FakeClock) -> None:
    """A SIGTERM 100 s before a window 700 s away is due in 600 s, on the wall clock: the loop looks
    again every LOOP_CEILING, and a step of the wall clock (here 595 s ahead) is caught up then."""
    daemon = build(maintenance_sigterm="before-window", maintenance_lead=100.0)
    clock.advance(READY_WITHIN)
    daemon._handle(window_in(clock, 700.0))
    daemon._handle(ValueChanged(MAINTENANCE, parse_maintenance_event("TERMINATE_ON_HOST_MAINTENANCE"), 0))
    assert turn(daemon, clock) == pytest.approx(LOOP_CEILING)
    clock.epoch += 595.0  # the wall clock steps; the monotonic clock does not
    assert turn(daemon, clock) == pytest.approx(5.0)
    clock.advance(5.0)
    turn(daemon, clock)
    assert daemon.lifecycle.drain is not None


def test_a_notice_put_off_until_before_its_window_wakes_the_loop_at_that_time(
    build: Any, clock: FakeClock
) -> None:
    """before-window: the window is 603 s away, the lead 600 s: the loop sleeps 3 s, not the ceiling, and
    the SIGTERM's drain starts when it wakes."""
    daemon = build(maintenance_sigterm="before-window", maintenance_lead=600.0)
    clock.advance(READY_WITHIN)
    daemon._handle(window_in(clock, 603.0))
    daemon._handle(ValueChanged(MAINTENANCE, parse_maintenance_event("TERMINATE_ON_HOST_MAINTENANCE"), 0))
    assert daemon.lifecycle.drain is None
    assert turn(daemon, clock) == pytest.approx(3.0)
    clock.advance(2.9)
    assert turn(daemon, clock) == pytest.approx(0.1)
    assert daemon.lifecycle.drain is None
    clock.advance(0.1)
    turn(daemon, clock)
    assert daemon.lifecycle.drain is not None


def test_drain_before_window_wakes_the_loop_at_that_time(build: Any, clock: FakeClock) -> None:
    daemon = build(drain_before_window=100.0)
    clock.advance(READY_WITHIN)
    daemon._handle(window_in(clock, 102.0))
    assert daemon.lifecycle.drain is None
    assert turn(daemon, clock) == pytest.approx(2.0)
    clock.advance(2.0)
    turn(daemon, clock)
    assert daemon.lifecycle.drain is not None


def test_systemd_watchdog_pings_are_due_every_half_watchdog_sec(build: Any, clock: FakeClock) -> None:
    pings: list[str] = []
    notifier = Notifier(
        {"NOTIFY_SOCKET": "@test", "WATCHDOG_USEC": "4000000"}, lambda m: pings.append(m) or True
    )
    daemon = build(notifier=notifier)
    clock.advance(READY_WITHIN)
    assert turn(daemon, clock) == pytest.approx(2.0)
    assert pings.count("WATCHDOG=1") == 1
    clock.advance(2.0)
    assert turn(daemon, clock) == pytest.approx(2.0)
    assert pings.count("WATCHDOG=1") == 2


def test_holders_are_looked_at_for_departures_every_departure_check(
    build: Any, clock: FakeClock, workloads: Workloads
) -> None:
    daemon = build()
    clock.advance(READY_WITHIN)
    assert turn(daemon, clock) == pytest.approx(device_check_in(daemon, clock))  # no holder to look at
    workloads.start("handled")
    daemon.index._publish(HoldersScanned(tuple(OwnScanner(workloads).scan().holders)))  # the index's thread
    message = daemon.inbox.get_nowait()  # the scan wakes the loop at once
    assert isinstance(message, HoldersScanned)
    daemon._handle(message)
    assert turn(daemon, clock) == DEPARTURE_CHECK
    assert daemon.departures.tracked
