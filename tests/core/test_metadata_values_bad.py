"""upcoming-maintenance under every form of bad input (any field mix, any text lines, bodies that were not
UTF-8): a value or `malformed`, never a crash (the well-formed values: test_metadata_values.py)."""

from __future__ import annotations

import datetime as dt
import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from watchdog.core.metadata_values import (
    MalformedValue,
    UpcomingMaintenance,
    parse_upcoming_maintenance,
)

UTC = dt.timezone.utc
KNOWN = ["NONE", "MIGRATE_ON_HOST_MAINTENANCE", "TERMINATE_ON_HOST_MAINTENANCE"]
tokens = st.from_regex(r"[A-Z][A-Z0-9_]{0,63}", fullmatch=True)


# --- upcoming-maintenance: every form of bad input --------------------------------------------------
ALIASES = [
    "type", "maintenance_type", "maintenanceType", "maintenance_status", "maintenanceStatus",
    "window_start_time", "windowStartTime", "window_end_time", "windowEndTime", "latest_window_start_time",
    "latestWindowStartTime", "can_reschedule", "canReschedule", "maintenance_reasons", "maintenanceReasons",
]  # fmt: skip
# JSON tokens json.dumps cannot write: out-of-range and non-finite numbers, integers past int()'s limit.
RAW_NUMBERS = ["1e999", "-1e999", "NaN", "Infinity", "-0", "1" + "0" * 400, "9" * 5000, "-" + "9" * 30]
field_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
    st.sampled_from(
        ["SCHEDULED", "PENDING", "true", "False", "2026-12-06T10:00:00Z", "9999-12-31T23:59:59-23:59"]
    ),
    st.sampled_from(["0000-01-01T00:00:00Z", "2026-02-30T10:00:00Z", "[1, 2]", '["A", 3]', "[[[", "\udc80"]),
    st.lists(st.text(max_size=8) | st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


def _value_or_malformed(body: str) -> None:
    """The parser's only outcomes: MalformedValue, or a value that is well formed (below)."""
    try:
        value = parse_upcoming_maintenance(body)
    except MalformedValue:
        return
    _assert_well_formed(value)


def _assert_well_formed(value: UpcomingMaintenance) -> None:
    """What the daemon may act on: words, UTC times, a boolean, printable reasons; and it can be described."""
    value.describe()
    notice = value.notice
    if notice is None:
        return
    for word in (notice.type, notice.status):
        assert word == "" or re.fullmatch(r"[A-Z][A-Z0-9_]*", word)
    for when in (notice.window_start, notice.window_end, notice.latest_window_start):
        assert when is None or when.utcoffset() == dt.timedelta(0)
    assert notice.can_reschedule in (None, True, False)
    assert all(isinstance(r, str) and r and r.isprintable() for r in notice.reasons)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from([*ALIASES, "error", "unknownField"]) | st.text(max_size=8), field_values),
    st.lists(st.tuples(st.sampled_from(ALIASES), st.sampled_from(RAW_NUMBERS)), max_size=2),
)
def test_upcoming_json_of_any_field_mix_is_a_value_or_malformed(
    fields: dict[str, object], raw: list[tuple[str, str]]
) -> None:
    """snake_case and camelCase mixed, fields missing, wrong types, huge and non-finite numbers."""
    body = json.dumps(fields)
    for name, token in raw:  # spliced in as JSON text: json.dumps would refuse or rewrite them
        body = body[:-1] + ("," if len(body) > 2 else "") + f"{json.dumps(name)}: {token}" + "}"
    _value_or_malformed(body)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(ALIASES) | st.text(max_size=8), st.text(max_size=40)), max_size=6))
def test_upcoming_text_lines_of_anything_are_a_value_or_malformed(lines: list[tuple[str, str]]) -> None:
    body = "\n".join(f"{key} {value}" for key, value in lines)
    _value_or_malformed(body)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.sampled_from(["surrogateescape", "replace", "latin-1"]))
def test_upcoming_body_that_was_not_utf8_is_a_value_or_malformed(raw: bytes, how: str) -> None:
    """The transport refuses bodies that are not UTF-8; should one reach the parser decoded some other way
    (lone surrogates, U+FFFD, Latin-1), it is still a value or malformed."""
    body = raw.decode("latin-1") if how == "latin-1" else raw.decode("utf-8", errors=how)
    for candidate in (body, '{"type": "' + body.replace("\\", "").replace('"', "") + '"}'):
        _value_or_malformed(candidate)
