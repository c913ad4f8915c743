"""The daemon's words: public, so pinned here as they are spelled in metrics, /status, hooks and the file."""

from __future__ import annotations

import pytest

from watchdog.core import vocabulary
from watchdog.core.vocabulary import (
    DEFAULT_ON_TIMEOUT,
    FINISHED_OUTCOMES,
    ON_TIMEOUT,
    WATCHED_KEYS,
    DaemonState,
    Outcome,
    as_on_timeout,
    source_of,
)


def test_the_public_values_do_not_change() -> None:
    assert [s.value for s in DaemonState] == ["idle", "draining", "drained", "timed_out", "cancelled"]
    assert [o.value for o in Outcome] == ["exited", "timed_out", "no_holders", "cancelled", "interrupted"]
    assert [k.source for k in WATCHED_KEYS] == ["maintenance-event", "preempted", "upcoming-maintenance"]
    assert [k.path for k in WATCHED_KEYS] == [
        "instance/maintenance-event",
        "instance/preempted",
        "instance/upcoming-maintenance",
    ]
    assert (vocabulary.DEFAULT_MAINTENANCE_GRACE, vocabulary.DEFAULT_PREEMPTION_GRACE) == (300.0, 25.0)
    assert (ON_TIMEOUT, DEFAULT_ON_TIMEOUT) == (("kill", "leave"), "kill")


def test_an_interrupted_drain_is_not_finished() -> None:
    """It is resumed by the next start: never counted, never a state of its own."""
    assert set(FINISHED_OUTCOMES) == set(Outcome) - {Outcome.INTERRUPTED}


def test_a_key_and_its_source_name_each_other() -> None:
    assert all(source_of(k.path) == k.source for k in WATCHED_KEYS)
    assert len({k.source for k in WATCHED_KEYS}) == len(WATCHED_KEYS)


def test_on_timeout_from_text() -> None:
    assert [as_on_timeout(text) for text in ON_TIMEOUT] == list(ON_TIMEOUT)
    with pytest.raises(ValueError, match="'kill' or 'leave', not 'wait'"):
        as_on_timeout("wait")
