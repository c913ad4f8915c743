"""The signal ladder: what it accepts, what it says, and that the drain's state machine walks the one it is
given (not SIGTERM and SIGKILL written into it)."""

from __future__ import annotations

import signal

import pytest

from tests.support.drain_core import GRACE, T0, A, B, sent_all
from watchdog.core.drain import DrainCore, DrainPlan, Outcome
from watchdog.core.ladder import DEFAULT_LADDER, At, Ladder, Step, ladder_for
from watchdog.core.process import Holder, ProcessIdentity

INT, TERM, KILL = signal.SIGINT, signal.SIGTERM, signal.SIGKILL


def test_the_settings_ladders() -> None:
    assert ladder_for("kill") == DEFAULT_LADDER == Ladder((Step(TERM, At.FOUND), Step(KILL, At.DEADLINE)))
    assert ladder_for("leave") == Ladder((Step(TERM, At.FOUND),))
    assert [ladder_for(t).on_timeout for t in ("kill", "leave")] == ["kill", "leave"]
    assert DEFAULT_LADDER.then() == "SIGKILL what still holds a device"
    assert ladder_for("leave").then() == "leave them"


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ((), "starts with a step at 'found'"),
        ((Step(KILL, At.DEADLINE),), "starts with a step at 'found'"),
        ((Step(KILL, At.FOUND),), "first signal must be one of"),  # SIGKILL saves nothing: never the ask
        ((Step(signal.SIGSTOP, At.FOUND),), "first signal must be one of"),
        ((Step(TERM, At.FOUND), Step(TERM, At.DEADLINE)), "at most SIGKILL at the deadline"),
        ((Step(TERM, At.FOUND), Step(KILL, At.FOUND)), "at most SIGKILL at the deadline"),
        ((Step(TERM, At.FOUND), Step(KILL, At.DEADLINE), Step(KILL, At.DEADLINE)), "at most SIGKILL"),
    ],
)
def test_a_ladder_the_drain_cannot_walk_is_refused_with_why(steps: tuple[Step, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Ladder(steps)


def test_an_unknown_on_timeout_is_refused() -> None:
    with pytest.raises(ValueError, match="on_timeout must be 'kill' or 'leave', not 'stop'"):
        ladder_for("stop")  # type: ignore[arg-type]


def core_with(ladder: Ladder, *holders: Holder) -> DrainCore:
    plan = DrainPlan(deadline=T0 + GRACE, ladder=ladder, rescan_interval=1.0, kill_wait=10.0)
    return DrainCore(holders, plan, now=T0, now_wall=1.7e9)


def test_the_drain_asks_with_the_ladders_first_signal_and_kills_with_its_deadline_step() -> None:
    c = core_with(ladder_for("kill", ask=INT), A)
    first = c.start()
    assert [(a.identity, a.signum, a.at) for a in first] == [(A.identity, INT, At.FOUND)]
    sent_all(c, first, T0)
    newcomer = c.observe_scan([A, B], running=(), now=T0 + 1)  # a newcomer gets the same ask
    assert [(a.identity, a.signum) for a in newcomer] == [(B.identity, INT)]
    sent_all(c, newcomer, T0 + 1)
    assert c.record.processes[A.identity].signalled_at == T0  # the ask, whichever signal it is
    kills = c.observe_scan([A, B], running=(), now=T0 + GRACE)
    assert sorted((a.identity.pid, a.signum, a.at) for a in kills) == [
        (A.pid, KILL, At.DEADLINE),
        (B.pid, KILL, At.DEADLINE),
    ]
    sent_all(c, kills, T0 + GRACE)
    assert c.record.processes[A.identity].killed
    assert c.record.on_timeout == "kill"


def test_a_ladder_without_a_deadline_step_ends_the_drain_at_the_deadline_with_nothing_sent() -> None:
    c = core_with(ladder_for("leave"), A)
    sent_all(c, c.start(), T0)
    assert c.observe_scan([A], running=(), now=T0 + GRACE) == []
    assert c.record.outcome is Outcome.TIMED_OUT
    assert c.record.on_timeout == "leave"
    assert not c.record.processes[A.identity].killed


def test_a_process_signalled_before_with_the_ask_is_not_asked_again() -> None:
    already = {A.identity: {INT}}  # an earlier run sent the ask: SIGINT, not SIGTERM
    plan = DrainPlan(deadline=T0 + GRACE, ladder=ladder_for("kill", ask=INT), already_signalled=already)
    fresh = Holder(ProcessIdentity(99, 1), "p99", (), 0, ("/dev/accel0",))
    c = DrainCore([A, fresh], plan, now=T0, now_wall=0)
    assert [(a.identity.pid, a.signum) for a in c.start()] == [(99, INT)]
