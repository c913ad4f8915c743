"""The README and the reference pages stay true: the README opens with the two commands and names every
command; every setting, metric and journal MESSAGE_ID is documented on the page that holds it; every relative
link resolves."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry

from tests.support.markdown import DOCS, README, anchors, pages, relative_links
from watchdog.cli import COMMANDS
from watchdog.config.schema import SETTINGS
from watchdog.surface.logs import MESSAGE_IDS
from watchdog.surface.metrics import Metrics

README_TEXT = README.read_text()


def test_it_opens_with_the_two_commands() -> None:
    first_block = README_TEXT.split("```")[1]
    assert re.findall(r"^make (\w+)", first_block, re.M) == ["demo", "test"]


def test_the_readme_is_short_and_names_every_command() -> None:
    """Quick start, install, the commands, links: the rest lives in docs/."""
    assert len(README_TEXT.splitlines()) <= 260
    assert [name for name in COMMANDS if f"`tpu-watchdog {name}" not in README_TEXT] == []


def test_the_sections_come_in_the_order_a_new_user_needs_them() -> None:
    """The two commands, what it does, install, commands, the reference pages, then development; the
    hardening table lives in docs/hardening.md."""
    sections = re.findall(r"^## (.+)$", README_TEXT, re.M)
    assert sections == ["What it does", "Install", "Commands", "Documentation", "Development"]
    assert "| `CapabilityBoundingSet=" not in README_TEXT
    assert "| `CapabilityBoundingSet=" in (DOCS / "hardening.md").read_text()


def test_every_setting_is_documented_in_configuration_md() -> None:
    page = (DOCS / "configuration.md").read_text()
    missing = [s.key for s in SETTINGS if f"`{s.key}`" not in page and s.key.rpartition(".")[2] not in page]
    assert missing == []


def test_every_metric_is_documented_in_metrics_md() -> None:
    registry = CollectorRegistry()
    Metrics(registry=registry)
    names = {m.name for m in registry.collect() if m.name.startswith("tpu_watchdog_")}
    page = (DOCS / "metrics.md").read_text()
    assert sorted(n for n in names if f"`{n}" not in page) == []


def test_every_message_id_is_documented_in_logs_md() -> None:
    page = (DOCS / "logs.md").read_text()
    assert sorted(kind for kind, mid in MESSAGE_IDS.items() if f"`{mid}`" not in page) == []


def test_every_relative_link_resolves_to_a_file_and_its_heading() -> None:
    broken = []
    for page in pages():
        for target in relative_links(page):
            path, _, fragment = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.relative_to(README.parent)}: {target} (no such file)")
            elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
                broken.append(f"{page.relative_to(README.parent)}: {target} (no such heading)")
    assert broken == []
