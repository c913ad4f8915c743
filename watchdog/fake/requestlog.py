"""The record of metadata requests the fake answered: a bounded ring tests and users can read back."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import asdict, dataclass, replace
from typing import Any

DEFAULT_CAPACITY = 1000
VALUE_LIMIT = 200  # characters of a served body kept (an oversized fault's megabyte is not)


@dataclass(frozen=True)
class RequestRecord:
    """One metadata request, logged just before its answer is sent (a hanging GET: when it returns).

    `time` is the wall-clock arrival; `status` 0 means no HTTP answer was sent (an injected reset, or the
    client went away first); `note` says why when that is not obvious ("timeout", "fault:delay", ...).
    `answered` is when the answer went out, on the same clock (a trickle fault: when its last byte did),
    and `value` the body served (its first VALUE_LIMIT characters; "" without a 200): with them a soak can
    tell what a client was told, and when, from the server's side."""

    time: float
    method: str
    path: str
    query: str
    flavor_present: bool
    status: int
    note: str = ""
    answered: float | None = None
    value: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class RequestLog:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._lock = threading.Lock()
        self._records: deque[RequestRecord] = deque(maxlen=capacity)

    def add(self, record: RequestRecord) -> None:
        with self._lock:
            self._records.append(record)

    def answered(self, record: RequestRecord, at: float) -> None:
        """The answer of `record` went out at `at` (a trickled body, done): its record says so from now on."""
        with self._lock:
            for i in range(len(self._records) - 1, -1, -1):
                if self._records[i] is record:
                    self._records[i] = replace(record, answered=at)
                    return

    def records(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._records)

    def clear(self) -> None:
        with self._lock:
            self._records.clear()
