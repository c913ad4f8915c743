"""The README stays true: every setting, metric, journal MESSAGE_ID and command it must document is there."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from watchdog.cli import COMMANDS
from watchdog.config.schema import SETTINGS
from watchdog.surface.logs import MESSAGE_IDS
from watchdog.surface.metrics import Metrics

README_PATH = Path(__file__).resolve().parents[2] / "README.md"
README = README_PATH.read_text()


def test_it_opens_with_the_two_commands() -> None:
    first_block = README.split("```")[1]
    assert re.findall(r"^make (\w+)", first_block, re.M) == ["demo", "test"]


def test_every_setting_is_documented() -> None:
    missing = [
        s.key for s in SETTINGS if f"`{s.key}`" not in README and s.key.rpartition(".")[2] not in README
    ]
    assert not missing


def test_every_metric_is_documented() -> None:
    registry = CollectorRegistry()
    Metrics(registry=registry)
    names = {m.name for m in registry.collect() if m.name.startswith("tpu_watchdog_")}
    assert sorted(n for n in names if f"`{n}" not in README) == []


def test_every_message_id_and_command_is_documented() -> None:
    assert all(mid in README for mid in MESSAGE_IDS.values())
    assert all(f"tpu-watchdog {name}" in README for name in COMMANDS)


def test_the_sections_come_in_the_order_a_new_user_needs_them() -> None:
    """The two commands, what it does, install, commands, configuration, metrics and alerts, rehearsal,
    troubleshooting (then development); the hardening table lives in docs/hardening.md."""
    sections = re.findall(r"^## (.+)$", README, re.M)
    expected = ["What it does", "Install", "Commands", "Configuration", "Metrics and alerts", "Rehearsal",
                "Troubleshooting", "Development"]  # fmt: skip
    assert [s.split(":")[0] for s in sections] == expected
    assert "| `CapabilityBoundingSet=" not in README
    assert "| `CapabilityBoundingSet=" in (README_PATH.parent / "docs" / "hardening.md").read_text()
