"""A rehearsal pages nobody: the series a real dry-run daemon exports, before and after a rehearsed drain
that would have needed SIGKILL, fed to the shipped rules in a real promtool: no alert fires, at any time in
the next 40 minutes. The same drain for real does fire TPUDrainTimedOut (so the test can fail)."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.daemon_harness import MAINTENANCE, DaemonHarness
from tests.support.workloads import Workloads
from watchdog.fake.server import FakeMetadataServer

REPO = Path(__file__).resolve().parents[3]
RULES = REPO / "packaging" / "prometheus" / "tpu-watchdog.rules.yml"
STEPS_BEFORE, STEPS_AFTER = 5, 40  # minutes of samples: idle, then the drain's aftermath (event still on)
EVAL_MINUTES = (1, 5, 6, 8, 12, 20, 30, 44)

pytestmark = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool missing (make installs it)"
)


def scrape(harness: DaemonHarness) -> dict[str, float]:
    """The daemon's tpu_watchdog_* samples, as `name{labels}` -> value, with the target's job and instance."""
    samples: dict[str, float] = {}
    text = generate_latest(harness.metrics.registry).decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.startswith("tpu_watchdog_") or sample.name.endswith("_created"):
                continue
            labels = {**sample.labels, "job": "tpu-watchdog", "instance": "h1:9478"}
            inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            samples[f"{sample.name}{{{inner}}}"] = sample.value
    samples['up{instance="h1:9478",job="tpu-watchdog"}'] = 1.0
    return samples


def drain_and_scrape(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path, dry_run: bool
) -> tuple[dict[str, float], dict[str, float]]:
    workloads.start("report")  # never exits on SIGTERM: the drain reaches its deadline
    with DaemonHarness(
        tmp_path / "state", fake, workloads, dry_run=dry_run, maintenance_grace=1.0
    ) as harness:
        before = scrape(harness)
        fake.set(MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE")
        harness.wait_state("drained" if dry_run else "timed_out")
        return before, scrape(harness)


def promtool_test(tmp_path: Path, before: dict[str, float], after: dict[str, float]) -> str:
    """promtool's verdict on "no shipped alert fires": '' when it holds, else its report."""

    def text(value: float | None) -> str:
        return "_" if value is None else ("NaN" if math.isnan(value) else repr(value))

    def values(name: str) -> str:
        return " ".join([text(before.get(name))] * STEPS_BEFORE + [text(after[name])] * STEPS_AFTER)

    series = [{"series": name, "values": values(name)} for name in sorted(after)]
    alerts = re.findall(r"^\s*- alert: (\w+)$", RULES.read_text(), re.MULTILINE)
    assert len(alerts) >= 7, alerts
    cases = [{"eval_time": f"{m}m", "alertname": a, "exp_alerts": []} for a in alerts for m in EVAL_MINUTES]
    spec = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": cases}],
    }
    path = tmp_path / "rehearsal.test.yml"
    path.write_text(json.dumps(spec, indent=1))  # JSON is YAML
    done = subprocess.run(
        ["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode == 0:
        return ""
    fired = sorted(set(re.findall(r"alertname: (\w+), time", done.stdout)))
    return f"alerts fired: {fired}\n{done.stdout[:2000]}{done.stderr}"


def test_no_shipped_alert_fires_for_a_rehearsal(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path
) -> None:
    before, after = drain_and_scrape(fake, workloads, tmp_path, dry_run=True)
    assert (
        after['tpu_watchdog_dry_run_drains_total{instance="h1:9478",job="tpu-watchdog",outcome="timed_out"}']
        == 1
    )
    assert promtool_test(tmp_path, before, after) == ""


def test_the_same_drain_for_real_does_page(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path
) -> None:
    before, after = drain_and_scrape(fake, workloads, tmp_path, dry_run=False)
    report = promtool_test(tmp_path, before, after)
    assert "TPUDrainTimedOut" in report, report
