"""Time as the rest of the code sees it: injected, so the pure core never reads the real clock itself."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never jumps (deadlines, timeouts)."""
        ...

    def wall(self) -> float:
        """Seconds since the epoch (what humans, state files and metrics see)."""
        ...


class SystemClock:
    """The real clocks of this machine."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()
