"""Injected failures: the next N matching metadata requests get a status, a reset, a delay, garbage, an
oversized body, an answer without the flavor header, a body that trickles out over `seconds`, or a fresh
ETag with an unchanged value. The book is thread-safe; handlers `take` from it."""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, cast, get_args

from watchdog.fake.store import normalize_key

FaultKind = Literal["status", "reset", "delay", "garbage", "oversized", "no_flavor", "trickle", "etag"]
FAULT_KINDS: tuple[str, ...] = get_args(FaultKind)
OVERSIZED_BYTES = 2 * 1024 * 1024  # 2 MiB: far over the 64 KiB a careful client accepts
MAX_SIZE = 64 * 1024 * 1024  # an oversized body is built in memory: keep a typo from eating the fake's RAM
GARBAGE = bytes(range(255, -1, -1))  # every byte value: NUL, control bytes, invalid UTF-8


@dataclass(frozen=True)
class Fault:
    """One kind of failure for the next `count` requests to `path` (None: any metadata path)."""

    kind: FaultKind
    count: int = 1
    status: int = 503
    seconds: float = 2.0
    path: str | None = None
    size: int = OVERSIZED_BYTES  # bytes of an "oversized" body

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; expected one of {', '.join(FAULT_KINDS)}")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"fault count must be an integer >= 1, not {self.count!r}")
        if isinstance(self.status, bool) or not isinstance(self.status, int) or not 100 <= self.status <= 599:
            raise ValueError(f"fault status must be an HTTP status 100..599, not {self.status!r}")
        seconds = self.seconds
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
            raise ValueError(f"fault seconds must be a finite number, not {seconds!r}")
        if seconds < 0:
            raise ValueError(f"fault seconds must be >= 0, not {seconds!r}")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or not 0 < self.size <= MAX_SIZE:
            raise ValueError(f"fault size must be an integer 1..{MAX_SIZE}, not {self.size!r}")
        if self.path is not None:
            object.__setattr__(self, "path", normalize_key(self.path))

    def matches(self, path: str) -> bool:
        return self.path is None or self.path == normalize_key(path)

    @classmethod
    def from_json(cls, document: object) -> Fault:
        """A fault from its JSON form (the control API); ValueError naming what is wrong."""
        if not isinstance(document, Mapping):
            raise ValueError('a fault is a JSON object like {"kind": "status", "status": 503, "count": 2}')
        fields = dict(cast(Mapping[str, Any], document))
        unknown = set(fields) - {"kind", "count", "status", "seconds", "path", "size"}
        if unknown:
            raise ValueError(f"unknown fault field(s): {', '.join(sorted(unknown))}")
        if "kind" not in fields:
            raise ValueError(f"a fault needs a kind: one of {', '.join(FAULT_KINDS)}")
        path = fields.get("path")
        if path is not None and not isinstance(path, str):
            raise ValueError(f"fault path must be a string, not {path!r}")
        return cls(**fields)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class FaultBook:
    """Pending faults, first added first used; a request takes at most one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[Fault] = []

    def add(self, fault: Fault) -> None:
        with self._lock:
            self._pending.append(fault)

    def take(self, path: str) -> Fault | None:
        """The first pending fault matching `path`, its count spent by one; None when none matches."""
        try:
            normalize_key(path)
        except ValueError:
            return None
        with self._lock:
            for i, fault in enumerate(self._pending):
                if fault.matches(path):
                    if fault.count == 1:
                        del self._pending[i]
                    else:
                        self._pending[i] = replace(fault, count=fault.count - 1)
                    return fault
            return None

    def pending(self) -> list[Fault]:
        with self._lock:
            return list(self._pending)

    def clear(self) -> None:
        with self._lock:
            self._pending.clear()
