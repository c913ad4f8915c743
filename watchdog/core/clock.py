"""Time as the rest of the code sees it: injected, so the pure core never reads the real clock itself."""

from __future__ import annotations

import calendar
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


def utc_text(wall: float) -> str:
    """RFC 3339 in UTC with a Z, to the millisecond: `2026-12-01T13:45:01.123Z` (history, status)."""
    whole = int(wall // 1)
    millis = min(999, round((wall - whole) * 1000))
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{millis:03d}Z"


def parse_utc_text(text: str) -> float:
    """The epoch seconds of a `utc_text` time (0.0 when `text` is not one: an unreadable time is old)."""
    head, _, millis = text.rstrip("Z").partition(".")
    try:
        whole = calendar.timegm(time.strptime(head, "%Y-%m-%dT%H:%M:%S"))
        return whole + (int(millis[:3].ljust(3, "0")) / 1000 if millis else 0.0)
    except ValueError:
        return 0.0
