"""Holders that exit while the host has no event: said once, counted, dropped from /status and the gauge;
never while an event is on or a drain runs (those exits are the drain's). Real children, real pidfds."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
from collections.abc import Sequence

import pytest

from tests.support.waiting import wait_for
from tests.support.workloads import OwnScanner, Workloads
from watchdog.core.process import Holder
from watchdog.daemon.departures import Departures
from watchdog.daemon.outputs import Outputs
from watchdog.surface.metrics import Metrics


class Shown:
    """Who holds a device as /status shows it (`Reporter.holders_now`'s part): the departures' reports,
    each with the holders-left count at the time, so the order (the gauge first, then the count) shows."""

    def __init__(self, metrics: Metrics, holders: Sequence[Holder] = ()) -> None:
        self.metrics, self.holders = metrics, list(holders)
        self.reports: list[tuple[list[Holder], float]] = []

    def holders_now(self, holders: Sequence[Holder]) -> None:
        self.holders = list(holders)
        self.reports.append((self.holders, left_total(self.metrics)))


def left_total(metrics: Metrics) -> float:
    value = metrics.registry.get_sample_value("tpu_watchdog_holders_left_total")
    assert value is not None
    return value


def test_a_holder_that_exits_on_its_own_is_said_once_and_counted(
    workloads: Workloads, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    metrics = Metrics()
    child = workloads.start("handled")
    holders = list(OwnScanner(workloads).scan().holders)
    # /status shows a later scan's copy of the holder (here renamed): dropped all the same, by identity.
    shown = Shown(metrics, [dataclasses.replace(h, name="renamed") for h in holders])
    departures = Departures(metrics, Outputs(metrics), shown.holders_now)
    fds = len(os.listdir("/proc/self/fd"))
    departures.track(holders)
    assert len(os.listdir("/proc/self/fd")) == fds  # no fd per holder: the idle daemon's fds stay flat
    departures.tick(False, shown.holders)
    assert left_total(metrics) == 0
    assert shown.reports == []
    child.popen.send_signal(signal.SIGTERM)  # not the daemon: someone else ended it (another host's event)

    def departed() -> bool:
        departures.tick(False, shown.holders)
        return not shown.holders

    wait_for(departed, 10, what="the departure")
    assert left_total(metrics) == 1
    assert shown.reports == [([], 0)]  # shown gone before it was counted
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(said) == 1
    assert f"pid {child.popen.pid}" in said[0]
    assert "exited 0" in said[0]
    assert "left on its own" in said[0]
    departures.tick(False, shown.holders)
    assert left_total(metrics) == 1  # once


def test_exits_while_an_event_is_on_are_the_drains_not_departures(workloads: Workloads) -> None:
    metrics = Metrics()
    shown = Shown(metrics)
    departures = Departures(metrics, Outputs(metrics), shown.holders_now)
    child = workloads.start("handled")
    departures.track(list(OwnScanner(workloads).scan().holders))
    departures.tick(True, shown.holders)  # an event came: the holders are forgotten
    child.popen.send_signal(signal.SIGTERM)
    child.popen.wait(timeout=10)
    departures.tick(False, shown.holders)
    assert departures.left() == []
    assert left_total(metrics) == 0


def test_a_holder_the_next_scan_no_longer_shows_is_not_watched(workloads: Workloads) -> None:
    metrics = Metrics()
    departures = Departures(metrics, Outputs(metrics), Shown(metrics).holders_now)
    child = workloads.start("release")
    departures.track(list(OwnScanner(workloads).scan().holders))
    child.popen.send_signal(signal.SIGTERM)  # it closes the device and keeps running
    child.expect("released")
    departures.track(list(OwnScanner(workloads).scan().holders))
    assert departures.tracked == {}
    child.popen.kill()
    child.popen.wait(timeout=10)
    assert departures.left() == []
    assert left_total(metrics) == 0
