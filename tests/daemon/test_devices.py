"""daemon/devices.py: what the daemon says about the watched device nodes, at start and on each change, with
real nodes appearing and going (the scan and the rule: tests/host/test_devices.py)."""

from __future__ import annotations

import logging
import types
from pathlib import Path

import pytest

from tests.support.workloads import UniqueDevice
from watchdog.daemon.devices import DeviceWatch
from watchdog.host.devices import find_devices
from watchdog.surface.metrics import Metrics


def test_a_node_that_goes_away_is_said_again_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tpu-watchdog")
    pattern = str(tmp_path / "accel*")
    view, metrics = types.SimpleNamespace(devices=()), Metrics()
    watch = DeviceWatch(lambda: find_devices([pattern]), [pattern], view, metrics, interval=30.0)  # type: ignore[arg-type]
    gauge = lambda: metrics.registry.get_sample_value("tpu_watchdog_devices")  # noqa: E731
    with UniqueDevice(tmp_path) as node:
        watch.check(0.0)
        assert gauge() == 1
        assert [m.path for m in view.devices] == [str(node.path)]
        started = caplog.text
        assert f"watching 1 TPU device node(s): {node.path}" in started
        assert "watched, but not identified as a TPU device" in started  # no sysfs entry: said at start
        node.path.unlink()
        watch.check(10.0)  # not due yet: nothing looked at, nothing said
        assert gauge() == 1
        watch.check(30.0)
    assert gauge() == 0
    assert view.devices == ()
    (empty,) = [r for r in caplog.records if "no TPU device node matches" in r.getMessage()]
    assert (empty.levelno, "any more" in empty.getMessage()) == (logging.WARNING, True)
    caplog.clear()
    watch.check(60.0)  # the same (empty) set: said once, not every look
    assert caplog.text == ""
