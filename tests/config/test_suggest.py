"""Suggestions for a mistyped key: the close names only, or none."""

from __future__ import annotations

import pytest

from watchdog.config.schema import BY_KEY, SECTIONS
from watchdog.config.suggest import suggest

KNOWN = [*BY_KEY, *sorted(SECTIONS)]


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("drain.maintenance_grce", " (did you mean 'drain.maintenance_grace'?)"),
        ("dryrun", " (did you mean 'dry_run'?)"),
        ("drian", " (did you mean 'drain'?)"),
        ("grace", " (did you mean 'drain.maintenance_grace' or 'drain.preemption_grace'?)"),
        ("hooks.on_start", " (did you mean 'hooks.on_event_start'?)"),
        ("listen_address", " (did you mean 'listen'?)"),
        ("port", ""),
        ("verbose", ""),
        ("x", ""),
    ],
)
def test_close_names_only(typed: str, expected: str) -> None:
    assert suggest(typed, KNOWN) == expected


def test_more_than_three_equally_close_names_is_no_suggestion() -> None:
    assert suggest("on", ["a.on_x", "b.on_y", "c.on_z", "d.on_w"]) == ""
    assert suggest("thing", ["a.thing_one", "b.thing_two", "c.thing_six", "d.thing_ten"]) == ""
    assert (
        suggest("thing", ["a.thing_one", "b.thing_two"]) == " (did you mean 'a.thing_one' or 'b.thing_two'?)"
    )
