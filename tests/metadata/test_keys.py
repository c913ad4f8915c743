"""The watched keys: each spec is keyed by its own path, parses its own key's values (and refuses the other
keys'), and only upcoming-maintenance has the special cases (JSON, a 503 that is a value, a 404 that means
"this machine lacks it", polling)."""

from __future__ import annotations

import pytest

from watchdog.core.metadata_values import (
    PARSERS,
    MaintenanceEvent,
    MaintenanceKind,
    MalformedValue,
    Preempted,
    UpcomingMaintenance,
)
from watchdog.metadata.keys import DEFAULT_KEYS, KEY_SPECS, MAINTENANCE_EVENT, PREEMPTED, UPCOMING_MAINTENANCE


def test_the_daemon_watches_the_three_keys_of_the_guest_agent() -> None:
    assert DEFAULT_KEYS == (
        "instance/maintenance-event",
        "instance/preempted",
        "instance/upcoming-maintenance",
    )
    assert set(KEY_SPECS) == set(DEFAULT_KEYS)
    assert all(KEY_SPECS[key].path == key for key in DEFAULT_KEYS)  # a spec requests its own path


def test_each_key_is_parsed_by_its_own_parser() -> None:
    assert all(KEY_SPECS[key].parse is PARSERS[key] for key in DEFAULT_KEYS)  # the two tables agree
    event = KEY_SPECS[MAINTENANCE_EVENT].parse("TERMINATE_ON_HOST_MAINTENANCE")
    assert event == MaintenanceEvent(
        MaintenanceKind.TERMINATE_ON_HOST_MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE"
    )
    assert KEY_SPECS[MAINTENANCE_EVENT].parse("TRUE").kind is MaintenanceKind.UNKNOWN  # a token: pending
    assert KEY_SPECS[PREEMPTED].parse("TRUE") == Preempted(True)
    assert KEY_SPECS[UPCOMING_MAINTENANCE].parse('{"error": "no notifications have been received yet"}') == (
        UpcomingMaintenance(notice=None)
    )


@pytest.mark.parametrize(
    ("key", "body"),
    [
        (MAINTENANCE_EVENT, '{"error": "no notifications have been received yet"}'),  # upcoming's
        (PREEMPTED, "TERMINATE_ON_HOST_MAINTENANCE"),
        (PREEMPTED, "NONE"),
        (UPCOMING_MAINTENANCE, "[]"),
    ],
)
def test_a_value_of_another_key_is_refused(key: str, body: str) -> None:
    with pytest.raises(MalformedValue):
        KEY_SPECS[key].parse(body)


def test_only_upcoming_maintenance_has_special_cases() -> None:
    upcoming = KEY_SPECS[UPCOMING_MAINTENANCE]
    assert (upcoming.alt, upcoming.value_on_503, upcoming.unsupported_on_404, upcoming.may_poll) == (
        "json",
        True,
        True,
        True,
    )
    for key in (MAINTENANCE_EVENT, PREEMPTED):
        spec = KEY_SPECS[key]
        # A 404 or 503 on these is an error to retry, never "unsupported" or a value; they are never polled.
        assert (spec.alt, spec.value_on_503, spec.unsupported_on_404, spec.may_poll) == (
            None,
            False,
            False,
            False,
        )
