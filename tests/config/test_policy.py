"""The configuration's drain policy: every policy setting reaches `Policy`, and the defaults agree."""

from __future__ import annotations

import dataclasses

from watchdog.config.policy import policy_from_config
from watchdog.config.settings import default_config
from watchdog.core.policy import Policy


def test_the_default_configuration_is_the_default_policy() -> None:
    assert policy_from_config(default_config()) == Policy()


def test_every_policy_setting_is_carried_over() -> None:
    config = dataclasses.replace(
        default_config(),
        maintenance_grace=120.0,
        preemption_grace=10.0,
        migrate_action="drain",
        unknown_event_action="ignore",
        drain_before_window=600.0,
        drain_when_ongoing=True,
    )
    assert policy_from_config(config) == Policy(120.0, 10.0, "drain", "ignore", 600.0, True)
