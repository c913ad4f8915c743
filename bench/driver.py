"""What the benchmark drivers that run in their own PID namespace share: the fake's control API, the
daemon's /status, and waiting on a condition with a deadline (stdlib only: they run as `python -c`)."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from typing import Any


def put(url: str, value: str) -> None:
    """PUT `value` on the fake's control API (`url` is http://HOST/_fake/v1/KEY)."""
    request = urllib.request.Request(url, data=value.encode(), method="PUT")  # noqa: S310 - loopback fake
    with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310
        answer.read()


def status(port: int) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as answer:
        return json.loads(answer.read())


def wait(condition: Callable[[], object], timeout: float = 30, what: Callable[[], object] = str) -> None:
    """Poll `condition` (an OSError counts as not yet) until true; TimeoutError saying `what()` if never."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            try:
                seen = what()
            except Exception as exc:  # noqa: BLE001 - only words for the error below
                seen = exc
            raise TimeoutError(f"waited too long {seen}")
        time.sleep(0.02)
