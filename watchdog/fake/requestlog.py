"""The record of metadata requests the fake answered: a bounded ring tests and users can read back."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

DEFAULT_CAPACITY = 1000


@dataclass(frozen=True)
class RequestRecord:
    """One metadata request, logged just before its answer is sent (a hanging GET: when it returns).

    `time` is the wall-clock arrival; `status` 0 means no HTTP answer was sent (an injected reset, or the
    client went away first); `note` says why when that is not obvious ("timeout", "fault:delay", ...)."""

    time: float
    method: str
    path: str
    query: str
    flavor_present: bool
    status: int
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class RequestLog:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._lock = threading.Lock()
        self._records: deque[RequestRecord] = deque(maxlen=capacity)

    def add(self, record: RequestRecord) -> None:
        with self._lock:
            self._records.append(record)

    def records(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._records)

    def clear(self) -> None:
        with self._lock:
            self._records.clear()
