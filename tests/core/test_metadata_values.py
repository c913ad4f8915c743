"""The parsers of the three watched keys: every documented form is a value, junk is never one."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from watchdog.core.metadata_values import (
    MaintenanceEvent,
    MaintenanceKind,
    MaintenanceNotice,
    MalformedValue,
    Preempted,
    UpcomingMaintenance,
    format_time,
    parse_maintenance_event,
    parse_preempted,
    parse_rfc3339,
    parse_upcoming_maintenance,
)

UTC = dt.timezone.utc
KNOWN = ["NONE", "MIGRATE_ON_HOST_MAINTENANCE", "TERMINATE_ON_HOST_MAINTENANCE"]
tokens = st.from_regex(r"[A-Z][A-Z0-9_]{0,63}", fullmatch=True)


# --- maintenance-event ------------------------------------------------------------------------------
@pytest.mark.parametrize("raw", KNOWN)
def test_known_maintenance_values(raw: str) -> None:
    assert parse_maintenance_event(raw) == MaintenanceEvent(MaintenanceKind(raw), raw)


def test_one_trailing_newline_is_accepted_two_are_not() -> None:
    assert parse_maintenance_event("NONE\n").kind is MaintenanceKind.NONE
    for body in ("NONE\n\n", "NONE\r\n", " NONE", "NONE ", "\nNONE"):
        with pytest.raises(MalformedValue):
            parse_maintenance_event(body)


def test_unknown_well_formed_value_is_pending_of_unknown_kind() -> None:
    event = parse_maintenance_event("SHUTDOWN_ON_HOST_MAINTENANCE")
    assert event == MaintenanceEvent(MaintenanceKind.UNKNOWN, "SHUTDOWN_ON_HOST_MAINTENANCE")
    assert "unknown" in event.describe()


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("", "empty"),
        ("NONE\nTERMINATE_ON_HOST_MAINTENANCE", "several lines"),
        ("NO\x00NE", "non-printable"),
        ("A" * 65, "65 characters"),
        ("TERMINATE_ON_HOST_MAINTENANCE;rm", "not one upper-case token"),
        ("none", "not one upper-case token"),
        ("<html>", "not one upper-case token"),
        ("\ufffd\ufffd", "not one upper-case token"),
    ],
)
def test_malformed_maintenance_value_says_why(body: str, reason: str) -> None:
    with pytest.raises(MalformedValue, match=reason):
        parse_maintenance_event(body)


@given(tokens)
def test_every_token_round_trips(token: str) -> None:
    event = parse_maintenance_event(token)
    assert event.raw == token
    assert (event.kind is MaintenanceKind.UNKNOWN) == (token not in KNOWN)


@given(st.text())
def test_junk_never_becomes_a_maintenance_value(body: str) -> None:
    try:
        event = parse_maintenance_event(body)
    except MalformedValue:
        return
    # Only a token (with at most one newline) is a value, and it is exactly the token.
    assert body in (event.raw, event.raw + "\n")
    assert re.fullmatch(r"[A-Z][A-Z0-9_]{0,63}", event.raw)


@given(
    st.sampled_from(KNOWN),
    st.text(min_size=1).filter(lambda junk: re.search(r"[^A-Z0-9_]", junk) is not None and junk != "\n"),
    st.booleans(),
)
def test_known_value_with_junk_around_it_is_malformed(known: str, junk: str, before: bool) -> None:
    body = junk + known if before else known + junk
    assume(not re.fullmatch(r"[A-Z][A-Z0-9_]{0,63}\n?", body))  # "NONE" + "0\n": a token of its own, unknown
    with pytest.raises(MalformedValue):
        parse_maintenance_event(body)


# --- preempted --------------------------------------------------------------------------------------
def test_preempted_values() -> None:
    assert parse_preempted("TRUE") == Preempted(True)
    assert parse_preempted("FALSE\n") == Preempted(False)


@given(st.text())
def test_junk_never_becomes_preempted(body: str) -> None:
    try:
        value = parse_preempted(body)
    except MalformedValue:
        return
    assert body in ("TRUE", "FALSE", "TRUE\n", "FALSE\n")
    assert value.preempted == body.startswith("TRUE")


# --- RFC 3339 ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-12-06T10:00:00Z", dt.datetime(2026, 12, 6, 10, tzinfo=UTC)),
        ("2026-12-06T10:00:00z", dt.datetime(2026, 12, 6, 10, tzinfo=UTC)),
        ("2026-12-06T10:00:00+00:00", dt.datetime(2026, 12, 6, 10, tzinfo=UTC)),
        ("2026-12-06T12:30:00+02:30", dt.datetime(2026, 12, 6, 10, tzinfo=UTC)),
        ("2026-12-06T05:00:00-05:00", dt.datetime(2026, 12, 6, 10, tzinfo=UTC)),
        ("2026-12-06T10:00:00.5Z", dt.datetime(2026, 12, 6, 10, 0, 0, 500000, tzinfo=UTC)),
        ("2026-12-06T10:00:00.123456789Z", dt.datetime(2026, 12, 6, 10, 0, 0, 123456, tzinfo=UTC)),
    ],
)
def test_rfc3339_forms(text: str, expected: dt.datetime) -> None:
    parsed = parse_rfc3339(text, "t")
    assert parsed == expected
    assert parsed.utcoffset() == dt.timedelta(0)


@pytest.mark.parametrize(
    "text",
    [
        "2026-12-06T10:00:00",
        "2026-12-06",
        "2026-13-06T10:00:00Z",
        "2026-12-06T10:00:60Z",
        "0001-01-01T00:00:00+01:00",
    ],
)
def test_rfc3339_rejects_naive_impossible_and_out_of_range(text: str) -> None:
    with pytest.raises(MalformedValue):
        parse_rfc3339(text, "t")


@given(
    st.datetimes(timezones=st.just(UTC)),
    st.integers(min_value=-23 * 60 - 59, max_value=23 * 60 + 59),
    st.booleans(),
)
def test_rfc3339_round_trips_through_any_offset(when: dt.datetime, offset_min: int, zulu: bool) -> None:
    zone = dt.timezone(dt.timedelta(minutes=0 if zulu else offset_min))
    try:
        local = when.astimezone(zone)
    except OverflowError:
        return
    suffix = "Z" if zulu else local.strftime("%z")[:3] + ":" + local.strftime("%z")[3:]
    text = local.strftime("%Y-%m-%dT%H:%M:%S") + (f".{local.microsecond:06d}" if local.microsecond else "")
    text = f"{local.year:04d}" + text[text.index("-") :] + suffix
    assert parse_rfc3339(text, "t") == when


# --- upcoming-maintenance ---------------------------------------------------------------------------
SNAKE_EXAMPLE = {
    "can_reschedule": "true",
    "latest_window_start_time": "2026-12-08T10:00:00Z",
    "maintenance_reasons": ["HOST_UPGRADE"],
    "maintenance_status": "PENDING",
    "type": "SCHEDULED",
    "window_end_time": "2026-12-06T14:00:00Z",
    "window_start_time": "2026-12-06T10:00:00Z",
}
EXPECTED = MaintenanceNotice(
    type="SCHEDULED",
    status="PENDING",
    window_start=dt.datetime(2026, 12, 6, 10, tzinfo=UTC),
    window_end=dt.datetime(2026, 12, 6, 14, tzinfo=UTC),
    latest_window_start=dt.datetime(2026, 12, 8, 10, tzinfo=UTC),
    can_reschedule=True,
    reasons=("HOST_UPGRADE",),
)


def test_snake_case_json() -> None:
    assert parse_upcoming_maintenance(json.dumps(SNAKE_EXAMPLE)) == UpcomingMaintenance(EXPECTED)


def test_camel_case_json_with_real_booleans_and_offsets() -> None:
    body = {
        "canReschedule": True,
        "latestWindowStartTime": "2026-12-08T11:00:00+01:00",
        "maintenanceReasons": ["HOST_UPGRADE"],
        "maintenanceStatus": "PENDING",
        "maintenanceType": "SCHEDULED",
        "windowEndTime": "2026-12-06T14:00:00.000Z",
        "windowStartTime": "2026-12-06T02:00:00-08:00",
    }
    assert parse_upcoming_maintenance(json.dumps(body)) == UpcomingMaintenance(EXPECTED)


def test_text_lines_form_as_google_fixture_writes_it() -> None:
    body = "\n".join(
        [
            "can_reschedule true",
            "latest_window_start_time 2026-12-08T10:00:00+00:00",
            'maintenance_reasons ["HOST_UPGRADE"]',
            "maintenance_status PENDING",
            "type SCHEDULED",
            "window_end_time 2026-12-06T14:00:00+00:00",
            "window_start_time 2026-12-06T10:00:00+00:00",
        ]
    )
    assert parse_upcoming_maintenance(body) == UpcomingMaintenance(EXPECTED)


@pytest.mark.parametrize(
    "body",
    [
        "{}",
        "{ }",
        '{"error": "no notifications have been received yet, try again later"}',
        "error no notifications have been received yet, try again later",
    ],
)
def test_nothing_scheduled_forms(body: str) -> None:
    assert parse_upcoming_maintenance(body) == UpcomingMaintenance(None)
    assert parse_upcoming_maintenance(body).describe() == "none scheduled"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("", "empty"),
        ("[]", "expected an object"),
        ('"SCHEDULED"', "expected an object"),
        ("{", "not valid JSON"),
        ('{"foo": 1}', "no known field"),
        ('{"error": 3}', "no known field"),
        ('{"type": "SCHEDULED", "maintenanceType": "UNSCHEDULED"}', "disagree"),
        ('{"type": "SCHED ULED"}', "not a word"),
        ('{"window_start_time": "tomorrow"}', "RFC 3339"),
        ('{"window_start_time": "2026-12-06T10:00:00"}', "RFC 3339"),
        ('{"can_reschedule": "yes"}', "not true or false"),
        ('{"maintenance_reasons": [1]}', "not printable"),
        ('{"maintenance_reasons": {"a": 1}}', "not a list"),
        ("type SCHEDULED\ntype UNSCHEDULED", "not a new"),
        ("type SCHED\x00ULED", "non-printable"),
        ("[" * 100000, "not valid JSON"),
    ],
)
def test_malformed_upcoming_maintenance_says_why(body: str, reason: str) -> None:
    with pytest.raises(MalformedValue, match=reason):
        parse_upcoming_maintenance(body)


def _times() -> st.SearchStrategy[dt.datetime | None]:
    return st.none() | st.datetimes(
        min_value=dt.datetime(1971, 1, 1), max_value=dt.datetime(2999, 1, 1), timezones=st.just(UTC)
    )


notices = st.builds(
    MaintenanceNotice,
    type=st.sampled_from(["SCHEDULED", "UNSCHEDULED", "MULTIPLE", "UNKNOWN_TYPE", ""]),
    status=st.sampled_from(["PENDING", "ONGOING", "COMPLETE", ""]),
    window_start=_times(),
    window_end=_times(),
    latest_window_start=_times(),
    can_reschedule=st.none() | st.booleans(),
    reasons=st.lists(st.from_regex(r"[A-Z_]{1,20}", fullmatch=True), max_size=3).map(tuple),
)


def _render(notice: MaintenanceNotice, camel: bool, bool_strings: bool, zulu: bool) -> dict[str, object]:
    def time(value: dt.datetime | None) -> str | None:
        if value is None:
            return None
        return format_time(value) if zulu else value.isoformat()

    snake = ["type", "maintenance_status", "window_start_time", "window_end_time"]
    snake += ["latest_window_start_time", "can_reschedule", "maintenance_reasons"]
    camel_names = ["maintenanceType", "maintenanceStatus", "windowStartTime", "windowEndTime"]
    camel_names += ["latestWindowStartTime", "canReschedule", "maintenanceReasons"]
    names = camel_names if camel else snake
    reschedule: object = notice.can_reschedule
    if bool_strings and reschedule is not None:
        reschedule = str(reschedule).lower()
    values: list[object] = [
        notice.type or None,
        notice.status or None,
        time(notice.window_start),
        time(notice.window_end),
        time(notice.latest_window_start),
        reschedule,
        list(notice.reasons),
    ]
    document = {name: value for name, value in zip(names, values, strict=True) if value is not None}
    document.setdefault(names[0], notice.type)  # at least one known field, even if empty
    return document


@given(notices, st.booleans(), st.booleans(), st.booleans())
def test_upcoming_maintenance_json_round_trips(
    notice: MaintenanceNotice, camel: bool, bool_strings: bool, zulu: bool
) -> None:
    body = json.dumps(_render(notice, camel, bool_strings, zulu))
    assert parse_upcoming_maintenance(body) == UpcomingMaintenance(notice)


@given(notices)
def test_upcoming_maintenance_text_lines_round_trip(notice: MaintenanceNotice) -> None:
    def text(value: object) -> str:
        if isinstance(value, bool):
            return str(value).lower()
        if isinstance(value, list):
            return json.dumps(value, separators=(",", ":"))
        return str(value).replace("Z", "+00:00")  # the text form writes offsets, as Google's fixture does

    document = _render(notice, camel=False, bool_strings=False, zulu=True)
    body = "\n".join(f"{key} {text(value)}".rstrip() for key, value in sorted(document.items()))
    assert parse_upcoming_maintenance(body) == UpcomingMaintenance(notice)


@given(st.text(max_size=300))
def test_junk_text_is_never_a_notice_with_junk_in_it(body: str) -> None:
    try:
        value = parse_upcoming_maintenance(body)
    except MalformedValue:
        return
    if value.notice is not None:
        assert value.notice.type == "" or value.notice.type.isidentifier()
        assert all(reason.isprintable() for reason in value.notice.reasons)


@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.text()
        | st.sampled_from(["true", "2026-12-06T10:00:00Z"]),
        lambda c: (
            st.lists(c) | st.dictionaries(st.sampled_from([*SNAKE_EXAMPLE, "windowStartTime"]) | st.text(), c)
        ),
        max_leaves=12,
    )
)
def test_any_json_document_is_a_value_or_malformed_never_a_crash(document: object) -> None:
    with contextlib.suppress(MalformedValue):
        parse_upcoming_maintenance(json.dumps(document))
