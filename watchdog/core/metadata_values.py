"""Typed values of the three watched metadata keys, and strict parsers for them.

Pure: no I/O. A parser returns a value only for a body that really is one; anything else raises
`MalformedValue` naming what was wrong, because nothing may be signalled on the strength of bad data.

Trailing newline: the real server sends none, but `curl`-style fakes and hand-made files often end in
one, so exactly one trailing "\\n" is accepted and dropped. Two, "\\r\\n" or other whitespace are junk.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeAlias

from watchdog.core.vocabulary import MAINTENANCE_EVENT, PREEMPTED, UPCOMING_MAINTENANCE

UTC = dt.timezone.utc
MAX_TOKEN_LENGTH = 64
_TOKEN = re.compile(r"[A-Z][A-Z0-9_]*")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:([Zz])|([+-])(\d{2}):(\d{2}))",
    re.ASCII,
)


class MalformedValue(ValueError):  # noqa: N818 - the name the rest of the code (and its brief) uses
    """A body that is not a valid value of its key; the message says what was wrong with it."""


class MaintenanceKind(enum.Enum):
    NONE = "NONE"
    MIGRATE_ON_HOST_MAINTENANCE = "MIGRATE_ON_HOST_MAINTENANCE"
    TERMINATE_ON_HOST_MAINTENANCE = "TERMINATE_ON_HOST_MAINTENANCE"
    UNKNOWN = "UNKNOWN"  # a well-formed value we do not know: maintenance pending, kind unknown


@dataclass(frozen=True)
class MaintenanceEvent:
    kind: MaintenanceKind
    raw: str

    def describe(self) -> str:
        return self.raw if self.kind is not MaintenanceKind.UNKNOWN else f"{self.raw} (unknown kind)"


@dataclass(frozen=True)
class Preempted:
    preempted: bool

    def describe(self) -> str:
        return "TRUE" if self.preempted else "FALSE"


@dataclass(frozen=True)
class MaintenanceNotice:
    """One scheduled or ongoing maintenance; times are tz-aware UTC; "" / None / () where not given."""

    type: str
    status: str
    window_start: dt.datetime | None
    window_end: dt.datetime | None
    latest_window_start: dt.datetime | None
    can_reschedule: bool | None
    reasons: tuple[str, ...]

    def describe(self) -> str:
        parts = [self.type or "?", self.status or "?"]
        if self.window_start or self.window_end:
            parts.append(f"window {format_time(self.window_start)}..{format_time(self.window_end)}")
        if self.latest_window_start:
            parts.append(f"latest_start {format_time(self.latest_window_start)}")
        if self.can_reschedule is not None:
            parts.append(f"can_reschedule={str(self.can_reschedule).lower()}")
        if self.reasons:
            parts.append(f"reasons={','.join(self.reasons)}")
        return " ".join(parts)


@dataclass(frozen=True)
class UpcomingMaintenance:
    notice: MaintenanceNotice | None  # None: nothing scheduled

    def describe(self) -> str:
        return "none scheduled" if self.notice is None else self.notice.describe()


WatchedValue: TypeAlias = MaintenanceEvent | Preempted | UpcomingMaintenance


def format_time(when: dt.datetime | None) -> str:
    if when is None:
        return "?"
    text = when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{when.microsecond:06d}Z" if when.microsecond else f"{text}Z"


def _snippet(text: str) -> str:
    return repr(text[:80]) + ("..." if len(text) > 80 else "")


def _one_line(body: str, what: str) -> str:
    """The body without its one allowed trailing newline, or MalformedValue saying why it is not one line."""
    text = body[:-1] if body.endswith("\n") else body
    if not text:
        raise MalformedValue(f"{what}: empty body")
    if "\n" in text or "\r" in text:
        raise MalformedValue(f"{what}: several lines in {_snippet(body)}")
    bad = next((i for i, c in enumerate(text) if not c.isprintable()), None)
    if bad is not None:
        raise MalformedValue(
            f"{what}: non-printable character {text[bad]!r} at offset {bad} in {_snippet(text)}"
        )
    return text


def parse_maintenance_event(body: str) -> MaintenanceEvent:
    """NONE, MIGRATE_ or TERMINATE_ON_HOST_MAINTENANCE; another upper-case token: UNKNOWN; else malformed."""
    what = MAINTENANCE_EVENT.path
    text = _one_line(body, what)
    if len(text) > MAX_TOKEN_LENGTH:
        raise MalformedValue(
            f"{what}: {len(text)} characters, more than {MAX_TOKEN_LENGTH}: {_snippet(text)}"
        )
    if _TOKEN.fullmatch(text) is None:
        raise MalformedValue(
            f"{what}: {_snippet(text)} is not one upper-case token of letters, digits and underscores"
        )
    try:
        kind = MaintenanceKind(text)
    except ValueError:
        kind = MaintenanceKind.UNKNOWN
    return MaintenanceEvent(kind=kind, raw=text)


def parse_preempted(body: str) -> Preempted:
    """TRUE or FALSE, exactly; anything else is malformed."""
    what = PREEMPTED.path
    text = _one_line(body, what)
    if text == "TRUE":
        return Preempted(True)
    if text == "FALSE":
        return Preempted(False)
    raise MalformedValue(f"{what}: expected TRUE or FALSE, got {_snippet(text)}")


def parse_rfc3339(text: str, what: str) -> dt.datetime:
    """RFC 3339 with Z or any offset, fractional seconds of any length (Python 3.10's fromisoformat can't)."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise MalformedValue(f"{what}: {_snippet(text)} is not an RFC 3339 time with a Z or an offset")
    year, month, day, hour, minute, second, fraction, zulu, sign, off_h, off_m = match.groups()
    micro = int((fraction or "0")[:6].ljust(6, "0"))
    try:
        offset = dt.timedelta(0) if zulu else dt.timedelta(hours=int(off_h), minutes=int(off_m))
        zone = dt.timezone(-offset if sign == "-" else offset)
        local = dt.datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), micro, tzinfo=zone
        )
        return local.astimezone(UTC)
    except (ValueError, OverflowError) as exc:
        raise MalformedValue(f"{what}: {_snippet(text)} is not a valid time: {exc}") from None


# Our field -> the spellings in the docs (snake_case: host-events doc; camelCase: the TPU doc).
_ALIASES: dict[str, tuple[str, ...]] = {
    "type": ("type", "maintenance_type", "maintenanceType"),
    "status": ("maintenance_status", "maintenanceStatus"),
    "window_start": ("window_start_time", "windowStartTime"),
    "window_end": ("window_end_time", "windowEndTime"),
    "latest_window_start": ("latest_window_start_time", "latestWindowStartTime"),
    "can_reschedule": ("can_reschedule", "canReschedule"),
    "reasons": ("maintenance_reasons", "maintenanceReasons"),
}
_KNOWN_KEYS = frozenset(name for names in _ALIASES.values() for name in names)
_WHAT_UPCOMING = UPCOMING_MAINTENANCE.path


def _field(fields: Mapping[str, object], ours: str) -> object:
    present = [(name, fields[name]) for name in _ALIASES[ours] if name in fields]
    if len({json.dumps(v, sort_keys=True) for _, v in present}) > 1:
        names = ", ".join(name for name, _ in present)
        raise MalformedValue(f"{_WHAT_UPCOMING}: {names} disagree")
    return present[0][1] if present else None


def _word(value: object, name: str) -> str:
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or len(value) > MAX_TOKEN_LENGTH or _WORD.fullmatch(value) is None:
        raise MalformedValue(f"{_WHAT_UPCOMING}: {name} {value!r} is not a word of letters, digits, '_'")
    return value.upper()


def _time(value: object, name: str) -> dt.datetime | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise MalformedValue(f"{_WHAT_UPCOMING}: {name} {value!r} is not a time string")
    return parse_rfc3339(value, f"{_WHAT_UPCOMING}: {name}")


def _bool(value: object, name: str) -> bool | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise MalformedValue(f"{_WHAT_UPCOMING}: {name} {value!r} is not true or false")


def _reasons(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    items: list[object]
    if isinstance(value, str) and value.startswith("["):  # a list in the text form is written as JSON
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            raise MalformedValue(f"{_WHAT_UPCOMING}: maintenance_reasons {value!r} is not a list") from None
    if isinstance(value, str):
        items = [part for part in re.split(r"[,\s]+", value) if part]
    elif isinstance(value, list):
        items = list(value)
    else:
        raise MalformedValue(f"{_WHAT_UPCOMING}: maintenance_reasons {value!r} is not a list")
    for item in items:
        if not isinstance(item, str) or not item or not item.isprintable() or len(item) > 256:
            raise MalformedValue(f"{_WHAT_UPCOMING}: maintenance reason {item!r} is not printable text")
    return tuple(str(item) for item in items)


def _from_fields(fields: Mapping[str, object]) -> UpcomingMaintenance:
    names = set(fields)
    if not names or (names == {"error"} and isinstance(fields["error"], str)):
        return UpcomingMaintenance(notice=None)
    if not names & _KNOWN_KEYS:
        raise MalformedValue(f"{_WHAT_UPCOMING}: no known field among {sorted(names)[:10]}")
    notice = MaintenanceNotice(
        type=_word(_field(fields, "type"), "type"),
        status=_word(_field(fields, "status"), "maintenance_status"),
        window_start=_time(_field(fields, "window_start"), "window_start_time"),
        window_end=_time(_field(fields, "window_end"), "window_end_time"),
        latest_window_start=_time(_field(fields, "latest_window_start"), "latest_window_start_time"),
        can_reschedule=_bool(_field(fields, "can_reschedule"), "can_reschedule"),
        reasons=_reasons(_field(fields, "reasons")),
    )
    return UpcomingMaintenance(notice=notice)


def _text_fields(body: str) -> dict[str, object]:
    """The `key value` lines form (what the server sends without alt=json)."""
    fields: dict[str, object] = {}
    for number, line in enumerate(body.split("\n"), start=1):
        if not line.strip():
            continue
        if not line.isprintable():
            raise MalformedValue(f"{_WHAT_UPCOMING}: non-printable text on line {number}: {_snippet(line)}")
        key, _, value = line.strip().partition(" ")
        if _WORD.fullmatch(key) is None or key in fields:
            raise MalformedValue(
                f"{_WHAT_UPCOMING}: line {number} is not a new `key value`: {_snippet(line)}"
            )
        fields[key] = value.strip()
    if not fields:
        raise MalformedValue(f"{_WHAT_UPCOMING}: empty body")
    return fields


def parse_upcoming_maintenance(body: str) -> UpcomingMaintenance:
    """JSON (snake_case or camelCase keys) or `key value` lines; `{}` or only `error`: nothing scheduled."""
    if body.lstrip().startswith(("{", "[", '"')):
        try:
            decoded = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise MalformedValue(f"{_WHAT_UPCOMING}: not valid JSON ({exc}): {_snippet(body)}") from None
        if not isinstance(decoded, dict):
            raise MalformedValue(f"{_WHAT_UPCOMING}: JSON {type(decoded).__name__}, expected an object")
        return _from_fields(decoded)
    return _from_fields(_text_fields(body))


PARSERS: dict[str, Callable[[str], WatchedValue]] = {
    MAINTENANCE_EVENT.path: parse_maintenance_event,
    PREEMPTED.path: parse_preempted,
    UPCOMING_MAINTENANCE.path: parse_upcoming_maintenance,
}
