"""Capped exponential backoff with jitter, so a flapping metadata server is neither hammered nor forgotten."""

from __future__ import annotations

import random
from collections.abc import Callable


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
