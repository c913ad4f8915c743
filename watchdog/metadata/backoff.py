"""Capped exponential backoff with jitter, so a flapping metadata server is neither hammered nor forgotten.

A watch keeps two curves (`WatchBackoff`), chosen by whether the server answered at all. No answer (refused,
reset, timed out, name unresolved: `errors.NO_ANSWER`): 0.25 s doubling to 1 s, as the server is link-local
and a try costs it nothing, so after an outage of any length its return is heard within about a second (a
Spot VM's notice gives 30 s). An answer that is an error (5xx, 429, 403, a bad body, a malformed value): 1 s
doubling to 30 s, as the server is up and asks, or needs, to be left alone. Each curve counts its own
failures, so a 503 right after a long outage starts at 1 s; a good answer resets both.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from watchdog.metadata.errors import NO_ANSWER, ErrorKind


class Backoff:
    """Delays initial, initial*factor, ... up to cap, each scaled by a random factor in [1-jitter, 1+jitter]
    (never above cap); `reset()` after a success starts again from `initial`."""

    def __init__(
        self,
        initial: float = 1.0,
        cap: float = 30.0,
        factor: float = 2.0,
        jitter: float = 0.2,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if not 0 < initial <= cap:
            raise ValueError(f"backoff needs 0 < initial <= cap, got initial={initial} cap={cap}")
        if factor < 1 or not 0 <= jitter < 1:
            raise ValueError(f"backoff needs factor >= 1 and 0 <= jitter < 1, got {factor}, {jitter}")
        self.initial = initial
        self.cap = cap
        self.factor = factor
        self.jitter = jitter
        self._rand = rand
        self._failures = 0

    @property
    def failures(self) -> int:
        """Failures since the last reset."""
        return self._failures

    def next_delay(self) -> float:
        """Seconds to wait after one more failure."""
        nominal = min(self.cap, self.initial * self.factor ** min(self._failures, 64))
        self._failures += 1
        spread = 1.0 + self.jitter * (2.0 * self._rand() - 1.0)
        return min(self.cap, nominal * spread)

    def reset(self) -> None:
        self._failures = 0


class WatchBackoff:
    """A watch's delay after a failure: the no-answer curve or the error-answer curve (module docstring)."""

    def __init__(self, no_answer: Backoff | None = None, error_answer: Backoff | None = None) -> None:
        self.no_answer = no_answer if no_answer is not None else Backoff(initial=0.25, cap=1.0)
        self.error_answer = error_answer if error_answer is not None else Backoff(initial=1.0, cap=30.0)

    @classmethod
    def uniform(cls, initial: float, cap: float) -> WatchBackoff:
        """The same curve for both (tests shrink the delays this way), each still counting on its own."""
        return cls(Backoff(initial=initial, cap=cap), Backoff(initial=initial, cap=cap))

    def next_delay(self, kind: ErrorKind) -> float:
        """Seconds to wait after one more failure of this kind."""
        return (self.no_answer if kind in NO_ANSWER else self.error_answer).next_delay()

    def reset(self) -> None:
        self.no_answer.reset()
        self.error_answer.reset()
