"""Waiting on a condition with a deadline: the only way tests synchronise (never a bare sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float = 10.0, interval: float = 0.005, what: str = "") -> T:
    """The first truthy value of `condition()`, polled until `timeout` s; fails the test otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or condition!r}")
        time.sleep(interval)
