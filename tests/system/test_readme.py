"""The README stays true: every setting, metric, journal MESSAGE_ID and command it must document is there."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from watchdog.cli import COMMANDS
from watchdog.config.schema import SETTINGS
from watchdog.surface.logs import MESSAGE_IDS
from watchdog.surface.metrics import Metrics

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


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
