"""Backoff: starts near 1 s, doubles, stays under the cap, jitters within bounds, resets after success; a
watch's two curves, by whether the server answered."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from watchdog.metadata.backoff import Backoff, WatchBackoff
from watchdog.metadata.errors import NO_ANSWER, ErrorKind


def test_doubles_up_to_the_cap_without_jitter() -> None:
    backoff = Backoff(initial=1.0, cap=30.0, jitter=0.0)
    assert [backoff.next_delay() for _ in range(8)] == [1, 2, 4, 8, 16, 30, 30, 30]
    assert backoff.failures == 8


def test_reset_starts_again_from_the_first_delay() -> None:
    backoff = Backoff(jitter=0.0)
    for _ in range(5):
        backoff.next_delay()
    backoff.reset()
    assert backoff.next_delay() == 1.0


def test_jitter_uses_the_injected_random_source() -> None:
    assert Backoff(jitter=0.2, rand=lambda: 0.0).next_delay() == pytest.approx(0.8)
    assert Backoff(jitter=0.2, rand=lambda: 1.0).next_delay() == pytest.approx(1.2)


@given(st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=200))
def test_delays_are_positive_and_never_above_the_cap(draws: list[float]) -> None:
    values = iter(draws)
    backoff = Backoff(initial=1.0, cap=30.0, jitter=0.5, rand=lambda: next(values))
    delays = [backoff.next_delay() for _ in draws]
    assert all(0.5 <= d <= 30.0 for d in delays)


@pytest.mark.parametrize(
    "kwargs", [{"initial": 0.0}, {"initial": 5.0, "cap": 1.0}, {"jitter": 1.0}, {"factor": 0.5}]
)
def test_nonsense_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="backoff needs"):
        Backoff(**kwargs)


def test_no_answer_retries_within_a_second_and_an_error_answer_backs_off_to_30_s() -> None:
    backoff = WatchBackoff(Backoff(initial=0.25, cap=1.0, jitter=0.0), Backoff(jitter=0.0))
    assert [backoff.next_delay(ErrorKind.CONNECTION_REFUSED) for _ in range(5)] == [0.25, 0.5, 1, 1, 1]
    assert [backoff.next_delay(ErrorKind.HTTP_5XX) for _ in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert backoff.next_delay(ErrorKind.TIMEOUT) == 1  # each curve counts its own failures


@pytest.mark.parametrize("kind", sorted(NO_ANSWER, key=lambda k: k.value))
def test_every_no_answer_kind_takes_the_short_curve_by_default(kind: ErrorKind) -> None:
    backoff = WatchBackoff()
    assert max(backoff.next_delay(kind) for _ in range(50)) <= 1.0
    assert backoff.error_answer.failures == 0


def test_a_good_answer_resets_both_curves() -> None:
    backoff = WatchBackoff.uniform(initial=1.0, cap=30.0)
    for kind in (ErrorKind.DNS, ErrorKind.HTTP_429, ErrorKind.HTTP_429):
        backoff.next_delay(kind)
    backoff.reset()
    assert (backoff.no_answer.failures, backoff.error_answer.failures) == (0, 0)
