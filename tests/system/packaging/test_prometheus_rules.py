"""packaging/prometheus: the rules load in a real promtool with no complaint, and its unit tests pass (every
alert firing and not firing, every recording rule), and they only name series the daemon exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.markdown import DOCS, anchors
from watchdog.surface.metrics import Metrics

REPO = Path(__file__).resolve().parents[3]
RULES = REPO / "packaging" / "prometheus" / "tpu-watchdog.rules.yml"
RULE_TESTS = REPO / "packaging" / "prometheus" / "tpu-watchdog.rules.test.yml"
ALERTS = (
    "TPUWatchdogDown",
    "TPUWatchdogAbsent",
    "TPUWatchdogMetadataUnreachable",
    "TPUWatchdogStateNotPersisted",
    "TPUMaintenancePending",
    "TPUDrainTimedOut",
    "TPUPreempted",
    "TPUHolderWillLoseProgress",
    "TPUWatchdogNoDevices",
)

needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool missing: `apt-get install prometheus` (make installs it)",
)


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["promtool", *args], capture_output=True, text=True, timeout=120, check=False, cwd=RULES.parent
    )


@needs_promtool
def test_promtool_check_rules_is_clean() -> None:
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stderr == "", checked.stderr
    assert "SUCCESS: 17 rules found" in checked.stdout, checked.stdout


@needs_promtool
def test_promtool_unit_tests_pass() -> None:
    tested = promtool("test", "rules", str(RULE_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    """promtool passes a file that never mentions an alert: check each one has both kinds of case."""
    text = RULE_TESTS.read_text()
    cases = re.findall(r"alertname: (\w+)\n\s+exp_alerts:( \[\])?", text)
    assert {name for name, _ in cases} == set(ALERTS)
    for alert in ALERTS:
        kinds = {bool(empty) for name, empty in cases if name == alert}
        assert kinds == {True, False}, f"{alert} is not tested both firing and not firing"
    recorded = set(re.findall(r"^\s*- record:\s*(\S+)", RULES.read_text(), re.M))
    tested = set(re.findall(r"^\s*- expr: (\S+)$", text, re.M))
    assert recorded
    assert recorded <= tested, f"recording rules without a test: {recorded - tested}"


def test_rules_name_only_series_the_daemon_exports() -> None:
    exported = {
        s.name for family in Metrics(error_kinds=["timeout"]).registry.collect() for s in family.samples
    }
    used = set(re.findall(r"(?<![\w:])tpu_watchdog_\w+(?![\w:])", RULES.read_text()))
    assert used, "no tpu_watchdog series in the rules"
    assert used <= exported, f"rules name series the daemon does not export: {sorted(used - exported)}"


PLACEHOLDER = "https://tpu-watchdog.invalid/docs/runbooks.md"
SET_BASE = REPO / "packaging" / "prometheus" / "set-runbook-base.sh"


def test_every_alert_links_an_absolute_runbook_url_to_its_runbook() -> None:
    text = RULES.read_text()
    assert "runbook:" not in text  # the old relative annotation
    urls = dict(re.findall(r"- alert: (\w+)\n(?:.*\n)*?\s+runbook_url: \"([^\"]+)\"", text))
    assert set(urls) == set(ALERTS)
    headings = anchors(DOCS / "runbooks.md")
    for alert, url in urls.items():
        assert url == f"{PLACEHOLDER}#{alert.lower()}"
        assert url.rpartition("#")[2] in headings, f"{alert}: no heading '{alert}' in docs/runbooks.md"


@needs_promtool
def test_the_runbook_base_can_be_set_and_the_rules_still_pass(tmp_path: Path) -> None:
    base = "https://git.example.com/sre/tpu-watchdog/docs/runbooks.md"
    done = subprocess.run([str(SET_BASE), base], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    rewritten = tmp_path / "tpu-watchdog.rules.yml"
    rewritten.write_text(done.stdout)
    assert PLACEHOLDER + "#" not in done.stdout
    assert done.stdout.count(f'runbook_url: "{base}#') == len(ALERTS)
    checked = promtool("check", "rules", str(rewritten))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tests = RULE_TESTS.read_text().replace(PLACEHOLDER + "#", base + "#")
    (tmp_path / RULE_TESTS.name).write_text(tests.replace("tpu-watchdog.rules.yml", str(rewritten)))
    tested = promtool("test", "rules", str(tmp_path / RULE_TESTS.name))
    assert tested.returncode == 0, tested.stdout + tested.stderr


@pytest.mark.parametrize(
    "base", ["README.md", "ftp://host/x", "https://host/a#b", "https://host/a b", "https://h/&"]
)
def test_a_bad_runbook_base_is_refused_naming_it(base: str) -> None:
    done = subprocess.run([str(SET_BASE), base], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2
    assert done.stdout == ""
    assert base in done.stderr
