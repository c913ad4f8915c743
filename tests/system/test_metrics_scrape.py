"""The daemon's /metrics as Prometheus sees it: `promtool check metrics` on a running daemon finds nothing to
say, and a real Prometheus server scraping it (with our rules loaded) shows the state move from idle to
drained when a TERMINATE maintenance event drains a real child holding a real device node."""

from __future__ import annotations

import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon_harness import MAINTENANCE, DaemonHarness
from tests.support.prometheus_server import PrometheusServer
from tests.support.workloads import Workloads
from watchdog.fake.server import FakeMetadataServer
from watchdog.surface.httpapi import HttpSurface

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "packaging" / "prometheus" / "tpu-watchdog.rules.yml"

needs_prometheus = pytest.mark.skipif(
    shutil.which("prometheus") is None or shutil.which("promtool") is None,
    reason="prometheus/promtool missing: `apt-get install prometheus` (make installs it)",
)
pytestmark = [needs_prometheus, pytest.mark.slow]


@pytest.fixture
def daemon(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path
) -> Iterator[tuple[DaemonHarness, str]]:
    """A running daemon with one handled workload, and the address of its HTTP listener."""
    workloads.start("handled")
    with DaemonHarness(tmp_path / "state", fake, workloads) as harness:
        http = HttpSurface("127.0.0.1:0", harness.daemon.view)
        http.start()
        try:
            yield harness, http.address
        finally:
            http.stop()


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as answer:
        body: bytes = answer.read()
        return body


@pytest.fixture
def prometheus(daemon: tuple[DaemonHarness, str], tmp_path: Path) -> Iterator[PrometheusServer]:
    server = PrometheusServer(tmp_path / "prometheus", [daemon[1]], [RULES])
    try:
        yield server
    finally:
        server.stop()


def test_promtool_check_metrics_on_a_running_daemon(daemon: tuple[DaemonHarness, str]) -> None:
    harness, address = daemon
    harness.fake.set(MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE")
    harness.wait_state("drained")  # every series, histogram included, has moved from its zero
    exposition = get(f"http://{address}/metrics")
    assert b'tpu_watchdog_drains_total{outcome="exited"} 1.0' in exposition
    checked = subprocess.run(
        ["promtool", "check", "metrics"], input=exposition, capture_output=True, timeout=60, check=False
    )
    assert (checked.returncode, checked.stdout, checked.stderr) == (0, b"", b"")


def test_prometheus_sees_idle_then_drained(
    daemon: tuple[DaemonHarness, str], prometheus: PrometheusServer
) -> None:
    harness, address = daemon
    prometheus.wait_value('tpu_watchdog_state{state="idle"}', 1.0)
    assert prometheus.value('up{job="tpu-watchdog"}') == 1.0
    assert prometheus.value('tpu_watchdog_state{state="drained"}') == 0.0
    assert prometheus.value(f'tpu_watchdog_maintenance_event{{instance="{address}", value="NONE"}}') == 1.0

    harness.fake.set(MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE")
    harness.wait_state("drained")
    prometheus.wait_value('tpu_watchdog_state{state="drained"}', 1.0)
    assert prometheus.value('tpu_watchdog_state{state="idle"}') == 0.0
    assert prometheus.value('tpu_watchdog_maintenance_event{value="TERMINATE_ON_HOST_MAINTENANCE"}') == 1.0
    assert prometheus.value('tpu_watchdog_drains_total{outcome="exited"}') == 1.0
    assert prometheus.value('tpu_watchdog_signals_sent_total{signal="SIGTERM"}') == 1.0

    # Our rules run on the real series: the maintenance alert fires, and the fleet rules give a slice
    # (empty accelerator_type/zone here: the harness reads no host facts), with no rule in error.
    prometheus.wait_value('ALERTS{alertname="TPUMaintenancePending", alertstate="firing"}', 1.0)
    # The fleet group is evaluated on its own schedule: until it runs on a scrape taken after the drain, it
    # may still hold a sample that caught the daemon draining (under load the drain can span a scrape).
    prometheus.wait_value("slice:tpu_watchdog_hosts_draining:sum", 0.0)
    groups = prometheus.api("rules")["groups"]
    unhealthy = [(r["name"], r.get("lastError")) for g in groups for r in g["rules"] if r["health"] == "err"]
    assert not unhealthy, unhealthy


def test_metadata_last_success_is_set_once_the_watches_answer(daemon: tuple[DaemonHarness, str]) -> None:
    harness, _ = daemon
    harness.wait_metric("tpu_watchdog_metadata_last_success_timestamp_seconds", 1.0, timeout=5)
