"""Helpers the benchmarks share: one percentile definition, and waiting on a precondition with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable


def percentile(values: list[float], fraction: float) -> float:
    """The value at `fraction` of the sorted values (nearest rank on 0..n-1; 0.99 of 200 is the 198th)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def wait_until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    """Poll `condition` until true; a benchmark whose setup never comes true fails instead of measuring."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "benchmark precondition timed out"
        time.sleep(0.0005)
