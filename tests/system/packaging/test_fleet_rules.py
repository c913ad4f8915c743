"""packaging/prometheus/tpu-watchdog-fleet.rules.yml (the per-host fleet rules): promtool loads them cleanly,
their unit tests pass, they lint clean, and every recorded series docs/fleet.md names exists.
The rules on a live fleet (50 daemons, a real Prometheus): tests/system/test_fleet.py."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PROMETHEUS_DIR = REPO / "packaging" / "prometheus"
FLEET_RULES = PROMETHEUS_DIR / "tpu-watchdog-fleet.rules.yml"
FLEET_RULE_TESTS = PROMETHEUS_DIR / "tpu-watchdog-fleet.rules.test.yml"

needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool missing: `apt-get install --no-install-recommends prometheus` (make installs it)",
)


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["promtool", *args], capture_output=True, text=True, timeout=120, check=False, cwd=PROMETHEUS_DIR
    )


def recorded(path: Path) -> set[str]:
    return set(re.findall(r"^\s*- record: (\S+)$", path.read_text(), re.MULTILINE))


@needs_promtool
def test_promtool_check_rules_is_clean() -> None:
    checked = promtool("check", "rules", str(FLEET_RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stderr == ""
    assert "SUCCESS: 2 rules found" in checked.stdout, checked.stdout


@needs_promtool
def test_promtool_unit_tests_pass() -> None:
    tested = promtool("test", "rules", str(FLEET_RULE_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_every_fleet_rule_is_unit_tested() -> None:
    tested = set(re.findall(r"- expr: (\S+)$", FLEET_RULE_TESTS.read_text(), re.MULTILINE))
    assert recorded(FLEET_RULES) <= tested


def test_lint_clean() -> None:
    config = pytest.importorskip("yamllint.config").YamlLintConfig(file=str(REPO / ".yamllint"))
    linter = pytest.importorskip("yamllint.linter")
    problems = [
        f"{path.name}:{problem.line} {problem.message}"
        for path in (FLEET_RULES, FLEET_RULE_TESTS)
        for problem in linter.run(path.read_text(), config, str(path))
    ]
    assert problems == []


def test_the_fleet_doc_names_only_recorded_series() -> None:
    doc = (REPO / "docs" / "fleet.md").read_text()
    named = set(re.findall(r"`((?:slice|instance|multislice):tpu_watchdog_\w+:\w+)`", doc))
    known = recorded(FLEET_RULES) | recorded(PROMETHEUS_DIR / "tpu-watchdog.rules.yml")
    assert named, "docs/fleet.md names no recorded series"
    assert named <= known, named - known
    assert known <= named, f"recorded but not documented in docs/fleet.md: {known - named}"
