"""Time as the rest of the code sees it: injected, so the pure core never reads the real clock itself."""

from __future__ import annotations

import calendar
import datetime
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


def utc_time(epoch: float, timespec: str = "milliseconds") -> str:
    """RFC 3339 in UTC with a Z, e.g. 2026-12-01T13:45:01.123Z: how every time is written for people and
    machines alike (log lines, event ids, webhooks). Never raises: a time past year 9999 (a far deadline
    of a huge grace) or not a number is written as 9999-12-31T23:59:59.999Z, one before year 1 as
    0001-01-01T00:00:00.000Z, since a line about a drain must never fail on its own arguments."""
    try:
        moment = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)
    except (OverflowError, ValueError, OSError):  # out of datetime's years, or NaN
        moment = (datetime.datetime.min if epoch < 0 else datetime.datetime.max).replace(
            tzinfo=datetime.timezone.utc
        )
    return moment.isoformat(timespec=timespec).replace("+00:00", "Z")


def time_left(deadline: float, now: float) -> str:
    """`in 240 s`, or `passed 3 s ago`: a deadline relative to now, in words (never "-0 s left")."""
    left = deadline - now
    return (
        f"in {left:.0f} s"
        if left >= 0.5
        else ("passed just now" if left > -0.5 else f"passed {-left:.0f} s ago")
    )


def utc_text(wall: float) -> str:
    """RFC 3339 in UTC with a Z, to the millisecond: `2026-12-01T13:45:01.123Z` (history, status)."""
    return utc_time(wall)


def parse_utc_text(text: str) -> float:
    """The epoch seconds of a `utc_text` time (0.0 when `text` is not one: an unreadable time is old)."""
    head, _, millis = text.rstrip("Z").partition(".")
    try:
        whole = calendar.timegm(time.strptime(head, "%Y-%m-%dT%H:%M:%S"))
        return whole + (int(millis[:3].ljust(3, "0")) / 1000 if millis else 0.0)
    except ValueError:
        return 0.0
