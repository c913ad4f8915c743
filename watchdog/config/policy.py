"""The drain policy the configuration asks for: `Config` -> `core.policy.Policy`.

Here rather than in core, which must not know the configuration; apart from settings.py, so that loading
the configuration (`tpu-watchdog config`, `status`) does not import the policy.
"""

from __future__ import annotations

from watchdog.config.settings import Config
from watchdog.core.ladder import ladder_for
from watchdog.core.policy import Policy


def policy_from_config(config: Config) -> Policy:
    return Policy(
        maintenance_grace=config.maintenance_grace,
        preemption_grace=config.preemption_grace,
        migrate_action=config.migrate_action,
        unknown_event_action=config.unknown_event_action,
        drain_before_window=config.drain_before_window,
        drain_when_ongoing=config.drain_when_ongoing,
        maintenance_sigterm=config.maintenance_sigterm,
        maintenance_lead=config.maintenance_lead,
        ladder=ladder_for(config.on_timeout),
    )
