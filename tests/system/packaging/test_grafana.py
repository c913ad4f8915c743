"""packaging/grafana/tpu-watchdog.json: valid JSON, a datasource variable everywhere, and every query names
only series the daemon exports (watchdog/surface/metrics.py) or the recording rules define, so a renamed
metric fails here instead of leaving an empty panel on an SRE's screen.
promtool (when present) parses every query."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from watchdog.core.vocabulary import DaemonState
from watchdog.surface.metrics import MAINTENANCE_VALUES, STATES, Metrics

REPO = Path(__file__).resolve().parents[3]
DASHBOARD = REPO / "packaging" / "grafana" / "tpu-watchdog.json"
RULES = REPO / "packaging" / "prometheus" / "tpu-watchdog.rules.yml"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "Inf", "NaN", "inf", "nan"}
# What Grafana substitutes before a query reaches Prometheus; values that make each query valid PromQL.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__range": "6h",
    "$__interval": "15s",
    "$job": "tpu-watchdog",
    "$instance": ".*",
    "$accelerator_type": ".*",
    "$zone": ".*",
}


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def panel_exprs(data: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in all_panels(data["panels"]) for t in p.get("targets", [])]


def known_series() -> set[str]:
    """Sample names the daemon exposes (counters with _total, histograms with _bucket...) + recorded names."""
    names = {s.name for family in Metrics(error_kinds=["timeout"]).registry.collect() for s in family.samples}
    names |= set(re.findall(r"^\s*- record:\s*(\S+)", RULES.read_text(), re.M))
    return names


def metric_names(expr: str) -> set[str]:
    """Series names a PromQL expression selects: identifiers left once strings, label matchers, ranges,
    grouping clauses and function calls are taken out."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    found = set()
    for match in re.finditer(r"(?<![\w:$.])([A-Za-z_:][\w:]*)(\s*\()?", text):
        name, call = match.group(1), match.group(2)
        if not call and name not in KEYWORDS:
            found.add(name)
    return found


def variable_series(data: dict[str, Any]) -> list[str]:
    queries = [v["query"]["query"] for v in data["templating"]["list"] if v["type"] == "query"]
    assert queries, "the dashboard has no query variables"
    found = []
    for query in queries:
        match = re.match(r"label_values\(\s*([A-Za-z_:][\w:]*)", query)
        assert match, f"variable query is not label_values(metric..., label): {query}"
        found.append(match.group(1))
    return found


def test_metric_names_finds_selected_series_only() -> None:
    expr = (
        'sum by (le, outcome) (rate(foo_total{job="$job", x=~"a(b)"}[$__rate_interval])) '
        "* on (instance) group_left (zone) bar_info or histogram_quantile(0.9, baz) > bool 1e3"
    )
    assert metric_names(expr) == {"foo_total", "bar_info", "baz"}


def test_dashboard_is_valid_json_with_unique_panel_ids() -> None:
    data = dashboard()
    assert data["uid"] == "tpu-watchdog"
    ids = [p["id"] for p in all_panels(data["panels"])]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for panel in all_panels(data["panels"]):
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]), panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]


def test_every_query_names_only_exported_or_recorded_series() -> None:
    data = dashboard()
    known = known_series()
    exprs = panel_exprs(data)
    assert len(exprs) >= 20
    used = set()
    for expr in exprs:
        names = metric_names(expr)
        assert names, f"no series in {expr!r}"
        assert names <= known, f"unknown series {sorted(names - known)} in {expr!r}"
        used |= names
    unknown_in_variables = set(variable_series(data)) - known
    assert not unknown_in_variables, f"variables query unknown series {unknown_in_variables}"
    # The fleet row is built on every recording rule.
    recorded = set(re.findall(r"^\s*- record:\s*(\S+)", RULES.read_text(), re.M))
    assert recorded
    assert recorded <= used, f"recording rules not on the dashboard: {recorded - used}"


def test_datasource_is_a_variable_everywhere() -> None:
    data = dashboard()
    variables = {v["name"]: v for v in data["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in all_panels(data["panels"]):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE, variable["name"]
    assert {"accelerator_type", "zone", "instance"} <= set(variables)


def test_state_timelines_map_every_value_the_daemon_shows() -> None:
    """The per-host timelines encode a state as a number: each code must be mapped to its name."""
    panels = {p["title"]: p for p in all_panels(dashboard()["panels"])}
    for title, values in (
        ("Daemon state per host", STATES),
        ("Maintenance event per host", MAINTENANCE_VALUES),
    ):
        panel = panels[title]
        (mapping,) = panel["fieldConfig"]["defaults"]["mappings"]
        shown = {code: m["text"] for code, m in mapping["options"].items()}
        assert set(shown.values()) == set(values), title
        expr = panel["targets"][0]["expr"]
        for code, name in shown.items():
            assert re.search(rf'="{name}"\}} \* {code}\b', expr), f"{title}: {name} is not coded {code}"
    assert set(STATES) == {s.value for s in DaemonState}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool missing (apt-get install prometheus)")
def test_every_query_parses_as_promql(tmp_path: Path) -> None:
    """Each panel query, Grafana's variables substituted, parsed by `promtool check rules` as a rule."""
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for number, expr in enumerate(panel_exprs(dashboard())):
        for variable, value in sorted(GRAFANA_VARIABLES.items(), key=lambda kv: -len(kv[0])):
            expr = expr.replace(variable, value)
        assert "$" not in expr, f"unsubstituted variable in {expr!r}"
        lines += [f"      - record: dashboard_query_{number}", f"        expr: {json.dumps(expr)}"]
    rules = tmp_path / "dashboard.rules.yml"
    rules.write_text("\n".join(lines) + "\n")
    checked = subprocess.run(
        ["promtool", "check", "rules", str(rules)], capture_output=True, text=True, timeout=60, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
