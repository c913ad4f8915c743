"""Time as the rest of the code sees it: injected, so the pure core never reads the real clock itself."""

from __future__ import annotations

import calendar
import datetime
import threading
import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never jumps (deadlines, timeouts)."""
        ...

    def wall(self) -> float:
        """Seconds since the epoch (what humans, state files and metrics see)."""
        ...

    def wait(self, timeout: float, look: Callable[[float], bool]) -> bool:
        """Wait until `look` finds something (True) or `timeout` s pass on this clock. `look(t)` waits up
        to `t` real seconds on its own primitive (poll(2), a queue, an event) and says whether anything came.
        Every timed wait that decides when the daemon acts (the loop's, the drain's, the index's) goes
        through here, so a test's clock can run a whole daemon on its own time."""
        ...

    def spawn(self, target: Callable[[], None], name: str) -> threading.Thread:
        """Start a daemon thread whose waits this clock drives (the drain, the holder index)."""
        ...


class SystemClock:
    """The real clocks of this machine: a wait is `look`'s own, once."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def wait(self, timeout: float, look: Callable[[float], bool]) -> bool:
        return look(max(0.0, timeout))

    def spawn(self, target: Callable[[], None], name: str) -> threading.Thread:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        return thread


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
