"""Timeline parsing: durations, KEY=VALUE assignments, and step order."""

from __future__ import annotations

import pytest

from watchdog.fake.timeline import (
    Assignment,
    Step,
    TimelineError,
    parse_assignment,
    parse_duration,
    parse_steps,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("10s", 10.0),
        ("2m", 120.0),
        ("1m30s", 90.0),
        ("1h", 3600.0),
        ("0", 0.0),
        ("1.5s", 1.5),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "10x", "s", "-1s", "1m 30s", "10s5", "1d"])
def test_bad_durations_name_the_text(text: str) -> None:
    with pytest.raises(TimelineError, match="bad duration"):
        parse_duration(text)


def test_text_assignment() -> None:
    assert parse_assignment("instance/preempted=TRUE") == Assignment("instance/preempted", "TRUE")
    assert parse_assignment("/instance/maintenance-event=") == Assignment("instance/maintenance-event", "")
    assert parse_assignment("instance/attributes/x=a=b") == Assignment("instance/attributes/x", "a=b")


def test_reset_assignment() -> None:
    assignment = parse_assignment("instance/preempted=-")
    assert assignment.value is None
    assert assignment.describe() == "instance/preempted back to its default"


def test_upcoming_maintenance_takes_json() -> None:
    assignment = parse_assignment('instance/upcoming-maintenance={"type": "SCHEDULED"}')
    assert assignment.value == {"type": "SCHEDULED"}
    assert assignment.describe() == 'instance/upcoming-maintenance = {"type":"SCHEDULED"}'
    with pytest.raises(TimelineError, match="must be JSON"):
        parse_assignment("instance/upcoming-maintenance=SCHEDULED")


@pytest.mark.parametrize("text", ["instance/preempted", "=TRUE", "instance/../x=1"])
def test_bad_assignments_name_the_argument(text: str) -> None:
    with pytest.raises(TimelineError, match="bad assignment"):
        parse_assignment(text)


def test_steps_play_in_time_order_keeping_ties_in_order() -> None:
    steps = parse_steps(
        [
            ("1m", "instance/preempted=TRUE"),
            ("500ms", "instance/maintenance-event=TERMINATE_ON_HOST_MAINTENANCE"),
            ("1m", "instance/preempted=-"),
        ]
    )
    assert [(s.at, s.assignment.key, s.assignment.value) for s in steps] == [
        (0.5, "instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE"),
        (60.0, "instance/preempted", "TRUE"),
        (60.0, "instance/preempted", None),
    ]
    assert steps[1].describe() == "+60.000s instance/preempted = TRUE"


def test_a_bad_step_names_its_argument() -> None:
    with pytest.raises(TimelineError, match="--at soon instance/preempted=TRUE"):
        parse_steps([("soon", "instance/preempted=TRUE")])


def test_step_is_plain_data() -> None:
    assert Step(1.0, Assignment("k", "v")) == Step(1.0, Assignment("k", "v"))
