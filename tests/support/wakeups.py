"""How often a thread of this process wakes up: its context switches, from /proc/self/task/TID/status."""

from __future__ import annotations

import threading
import time
from pathlib import Path


def switches(thread: threading.Thread) -> int:
    """Voluntary + involuntary context switches of `thread` so far (a blocked thread's wakeup is one)."""
    text = Path(f"/proc/self/task/{thread.native_id}/status").read_text()
    values = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return int(values["voluntary_ctxt_switches"]) + int(values["nonvoluntary_ctxt_switches"])


def asleep(thread: threading.Thread, in_kernel: str = "") -> bool:
    """`thread` is blocked (state S in /proc), and, when `in_kernel` is given, in a kernel function whose
    name contains it (/proc wchan, e.g. "epoll"): a wait it stays in, not a lock on its way there."""
    task = Path(f"/proc/self/task/{thread.native_id}")
    if " S " not in (task / "stat").read_text():
        return False
    return in_kernel in (task / "wchan").read_text()


def wakeups(thread: threading.Thread, over: float) -> int:
    """How often `thread` woke up in the next `over` s: 0 for a thread blocked without a timeout, at least
    2 in 1.2 s for one polling every 0.5 s. An observation window, not a synchronisation."""
    before = switches(thread)
    time.sleep(over)
    return switches(thread) - before
