"""daemon/device_watch.py: what the daemon says about the watched device nodes, at start and on each
change, with real nodes appearing and going (the scan and the rule: tests/host/test_devices.py)."""

from __future__ import annotations

import logging
import types
from pathlib import Path

import pytest

from tests.support.failing_logs import every_line_raising
from tests.support.workloads import UniqueDevice
from watchdog.daemon.device_watch import DeviceWatch
from watchdog.daemon.outputs import Outputs
from watchdog.host.devices import find_devices
from watchdog.surface.metrics import Metrics


def test_a_node_that_goes_away_is_said_again_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tpu-watchdog")
    pattern = str(tmp_path / "accel*")
    view, metrics = types.SimpleNamespace(devices=()), Metrics()
    watch = DeviceWatch(lambda: find_devices([pattern]), [pattern], view, Outputs(metrics), interval=30.0)  # type: ignore[arg-type]
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


class RaisingGauge:
    def set(self, value: float) -> None:
        raise RuntimeError("the registry is broken")


def test_each_output_of_a_look_is_guarded_on_its_own(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A gauge that raises leaves /status and the line told; lines that raise leave /status and the gauge
    (each counted): a look once stopped at the first output that failed."""
    caplog.set_level(logging.INFO, logger="tpu-watchdog")
    pattern = str(tmp_path / "accel*")
    errors = lambda m, o: m.registry.get_sample_value("tpu_watchdog_output_errors_total", {"output": o})  # noqa: E731
    with UniqueDevice(tmp_path) as node:
        view, metrics = types.SimpleNamespace(devices=()), Metrics()
        metrics.devices = RaisingGauge()  # type: ignore[assignment]
        watch = DeviceWatch(lambda: find_devices([pattern]), [pattern], view, Outputs(metrics))  # type: ignore[arg-type]
        watch.check(0.0)
        assert [m.path for m in view.devices] == [str(node.path)]
        assert f"watching 1 TPU device node(s): {node.path}" in caplog.text
        assert errors(metrics, "metrics") == 1
        view, metrics = types.SimpleNamespace(devices=()), Metrics()
        watch = DeviceWatch(lambda: find_devices([pattern]), [pattern], view, Outputs(metrics))  # type: ignore[arg-type]
        with every_line_raising("tpu-watchdog") as lines:
            watch.check(0.0)
        assert [m.path for m in view.devices] == [str(node.path)]
        assert metrics.registry.get_sample_value("tpu_watchdog_devices") == 1
        assert lines.refused("watching 1 TPU device node(s)")
        assert lines.refused("not identified as a TPU device")  # the note after the failed line, told too
        assert errors(metrics, "log") == 2
