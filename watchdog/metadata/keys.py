"""The watched keys and how each one behaves: parser, format, what its 404 and 503 mean, fallback."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from watchdog.core import vocabulary
from watchdog.core.metadata_values import PARSERS, WatchedValue

MAINTENANCE_EVENT = vocabulary.MAINTENANCE_EVENT.path
PREEMPTED = vocabulary.PREEMPTED.path
UPCOMING_MAINTENANCE = vocabulary.UPCOMING_MAINTENANCE.path


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
    MAINTENANCE_EVENT: KeySpec(MAINTENANCE_EVENT, PARSERS[MAINTENANCE_EVENT]),
    PREEMPTED: KeySpec(PREEMPTED, PARSERS[PREEMPTED]),
    UPCOMING_MAINTENANCE: KeySpec(
        UPCOMING_MAINTENANCE,
        PARSERS[UPCOMING_MAINTENANCE],
        alt="json",
        value_on_503=True,
        unsupported_on_404=True,
        may_poll=True,
    ),
}
DEFAULT_KEYS: tuple[str, ...] = tuple(key.path for key in vocabulary.WATCHED_KEYS)
