"""The real clocks: monotonic never goes back and is not the wall clock; wall is seconds since the epoch.
`SystemClock` satisfies the `Clock` protocol the pure core is written against."""

from __future__ import annotations

import math
import time

import pytest

from watchdog.core.clock import Clock, SystemClock, time_left, utc_time


def test_wall_is_seconds_since_the_epoch() -> None:
    clock = SystemClock()
    before = time.time()
    now = clock.wall()
    assert before <= now <= time.time()


def test_monotonic_is_the_monotonic_clock_and_never_goes_back() -> None:
    clock = SystemClock()
    before = time.monotonic()
    readings = [clock.monotonic() for _ in range(1000)]
    assert readings == sorted(readings)
    assert before <= readings[0] <= readings[-1] <= time.monotonic()
    assert abs(clock.monotonic() - clock.wall()) > 3600  # boot-relative, not the epoch: never mixed up


def test_the_system_clock_is_a_clock() -> None:
    def deadline(clock: Clock, after: float) -> float:  # how the core uses any Clock
        return clock.monotonic() + after

    assert deadline(SystemClock(), 5.0) > time.monotonic()


def test_times_read_as_utc_with_a_z_and_deadlines_in_words() -> None:
    assert utc_time(1796142663.0064) == "2026-12-01T16:31:03.006Z"
    assert utc_time(1796142663.0, "seconds") == "2026-12-01T16:31:03Z"
    assert [time_left(100.0, now) for now in (0.0, 99.8, 100.3, 103.0)] == [
        "in 100 s",
        "passed just now",
        "passed just now",
        "passed 3 s ago",
    ]


@pytest.mark.parametrize(
    ("epoch", "written"),
    [
        (1.0e12, "9999-12-31T23:59:59.999Z"),  # year 33715: a deadline of an extreme grace
        (math.inf, "9999-12-31T23:59:59.999Z"),
        (math.nan, "9999-12-31T23:59:59.999Z"),
        (-1.0e12, "0001-01-01T00:00:00.000Z"),
        (-math.inf, "0001-01-01T00:00:00.000Z"),
        (1764600001.5, "2025-12-01T14:40:01.500Z"),
    ],
)
def test_utc_time_never_raises_a_time_beyond_its_years_is_the_nearest_it_can_write(
    epoch: float, written: str
) -> None:
    assert utc_time(epoch) == written
