"""Helpers for the drain state machine's tests (tests/core/test_drain*.py): holders, a core at T0, the first
wave sent."""

from __future__ import annotations

import signal
from typing import Any

from watchdog.core.drain import DrainCore, DrainPlan, OnTimeout, SendSignal, SignalResult
from watchdog.core.ladder import At, ladder_for
from watchdog.core.process import Holder, ProcessIdentity

TERM, KILL = signal.SIGTERM, signal.SIGKILL
T0 = 1000.0
GRACE = 300.0


def holder(pid: int, start: int = 1) -> Holder:
    return Holder(ProcessIdentity(pid, start), f"p{pid}", ("python", "train.py"), 0, ("/dev/accel0",))


A, B, C = holder(10), holder(20), holder(30)


def core(*holders: Holder, on_timeout: OnTimeout = "kill", **kw: Any) -> DrainCore:
    ladder = ladder_for(on_timeout)
    plan = DrainPlan(deadline=T0 + GRACE, ladder=ladder, rescan_interval=1.0, kill_wait=10.0, **kw)
    return DrainCore(holders, plan, now=T0, now_wall=1.7e9)


def term(h: Holder) -> SendSignal:
    """The default ladder's asking step, for `h`."""
    return SendSignal(h.identity, TERM, At.FOUND)


def kill(h: Holder) -> SendSignal:
    """The default ladder's deadline step, for `h`."""
    return SendSignal(h.identity, KILL, At.DEADLINE)


def sent_all(c: DrainCore, actions: list[SendSignal], now: float) -> None:
    for a in actions:
        c.observe_signal(a.identity, a.signum, SignalResult.SENT, now)


def started(*holders: Holder, **kw: Any) -> DrainCore:
    c = core(*holders, **kw)
    sent_all(c, c.start(), T0)
    return c
