"""The watched keys and how each one behaves: parser, format, what its 404 and 503 mean, fallback."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from watchdog.core.metadata_values import (
    WatchedValue,
    parse_maintenance_event,
    parse_preempted,
    parse_upcoming_maintenance,
)

MAINTENANCE_EVENT = "instance/maintenance-event"
PREEMPTED = "instance/preempted"
UPCOMING_MAINTENANCE = "instance/upcoming-maintenance"


@dataclass(frozen=True)
class KeySpec:
    path: str
    parse: Callable[[str], WatchedValue]
    alt: str | None = None
    # A 503 whose body parses is a value (upcoming-maintenance: 503 + {"error": ...} = nothing scheduled).
    value_on_503: bool = False
    # A 404 means this machine type lacks the key: say so once and stop watching it (no retry).
    unsupported_on_404: bool = False
    # Hanging GETs are not confirmed to work here: if they misbehave, poll instead.
    may_poll: bool = False


KEY_SPECS: dict[str, KeySpec] = {
    MAINTENANCE_EVENT: KeySpec(MAINTENANCE_EVENT, parse_maintenance_event),
    PREEMPTED: KeySpec(PREEMPTED, parse_preempted),
    UPCOMING_MAINTENANCE: KeySpec(
        UPCOMING_MAINTENANCE,
        parse_upcoming_maintenance,
        alt="json",
        value_on_503=True,
        unsupported_on_404=True,
        may_poll=True,
    ),
}
DEFAULT_KEYS: tuple[str, ...] = (MAINTENANCE_EVENT, PREEMPTED, UPCOMING_MAINTENANCE)
