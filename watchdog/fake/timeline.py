"""A scripted timeline for the fake: `--at 10s instance/maintenance-event=TERMINATE_ON_HOST_MAINTENANCE`.

Pure parsing: durations (500ms, 10s, 2m, 1m30s, 1h), assignments (KEY=VALUE, KEY=- for the default, JSON
for upcoming-maintenance), and the steps in the order they play.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from watchdog.fake.store import MetadataValue, normalize_key, parse_value

RESET = "-"
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


class TimelineError(ValueError):
    """A bad --set/--at argument; the message names it."""


def parse_duration(text: str) -> float:
    """Seconds in `text`: NUMBER+UNIT parts (h, m, s, ms) added up, like 1m30s, or bare seconds."""
    stripped = text.strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", stripped):
        return float(stripped)
    parts = _PART.findall(stripped)
    if not stripped or "".join(number + unit for number, unit in parts) != stripped:
        raise TimelineError(f"bad duration {text!r}: use forms like 500ms, 10s, 2m, 1m30s or 1h")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


@dataclass(frozen=True)
class Assignment:
    """Set `key` to `value`; a value of None puts the key back to its default answer."""

    key: str
    value: MetadataValue | None

    def describe(self) -> str:
        if self.value is None:
            return f"{self.key} back to its default"
        shown = self.value if isinstance(self.value, str) else _compact(self.value)
        return f"{self.key} = {shown}"


def _compact(value: MetadataValue) -> str:
    return json.dumps(value, separators=(",", ":"))


def parse_assignment(text: str) -> Assignment:
    """KEY=VALUE (the value as text; JSON for upcoming-maintenance), or KEY=- to reset the key."""
    raw_key, sep, raw_value = text.partition("=")
    if not sep:
        raise TimelineError(f"bad assignment {text!r}: expected KEY=VALUE, like instance/preempted=TRUE")
    try:
        key = normalize_key(raw_key)
    except ValueError as exc:
        raise TimelineError(f"bad assignment {text!r}: {exc}") from None
    if key == "":
        raise TimelineError(f"bad assignment {text!r}: the key is empty")
    if raw_value == RESET:
        return Assignment(key, None)
    try:
        return Assignment(key, parse_value(key, raw_value.encode()))
    except ValueError as exc:
        raise TimelineError(f"bad assignment {text!r}: {exc}") from None


@dataclass(frozen=True)
class Step:
    """One scripted change, `at` seconds after the fake started."""

    at: float
    assignment: Assignment

    def describe(self) -> str:
        return f"+{self.at:.3f}s {self.assignment.describe()}"


def parse_steps(pairs: Iterable[tuple[str, str] | list[str]]) -> list[Step]:
    """Steps from (DELAY, KEY=VALUE) pairs, in the order they play (ties keep the command-line order)."""
    steps = []
    for pair in pairs:
        delay, assignment = pair
        try:
            at = parse_duration(delay)
        except TimelineError as exc:
            raise TimelineError(f"--at {delay} {assignment}: {exc}") from None
        steps.append(Step(at, parse_assignment(assignment)))
    return sorted(steps, key=lambda step: step.at)
