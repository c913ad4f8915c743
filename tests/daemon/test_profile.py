"""daemon/profile.py: the profile's line at start is guarded, as every output of the daemon (the choice
itself: tests/core/test_accelerators.py)."""

from __future__ import annotations

from tests.support.failing_logs import every_line_raising
from watchdog.config.settings import default_config
from watchdog.core.accelerators import HostFacts, choose_profile
from watchdog.daemon.outputs import Outputs
from watchdog.daemon.profile import say_profile
from watchdog.surface.metrics import Metrics


def test_a_profile_line_that_raises_is_counted_and_stops_nothing() -> None:
    config = default_config()
    metrics = Metrics()
    with every_line_raising("tpu-watchdog") as lines:
        say_profile(choose_profile(config.profile, HostFacts()), config, Outputs(metrics))
    assert lines.refused("accelerator profile")
    assert metrics.registry.get_sample_value("tpu_watchdog_output_errors_total", {"output": "log"}) == 1
