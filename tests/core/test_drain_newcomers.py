"""The drain state machine with newcomers: late arrivals after the first wave keep the drain's deadline (one
found while SIGKILL's targets die gets both signals at once), and after a restart newcomers are held back
(never signalled, the drain kept open) until the event is confirmed."""

from __future__ import annotations

from tests.support.drain_core import GRACE, T0, TERM, A, B, C, core, kill, sent_all, started, term
from watchdog.core.drain import DrainCore, DrainPlan, ExitStatus, Outcome, Phase


def test_a_newcomer_after_the_first_wave_is_a_late_arrival_with_the_same_deadline() -> None:
    c = started(A)
    c.observe_exit(A.identity, ExitStatus(code=0), T0 + 1)
    assert c.record.outcome is Outcome.EXITED  # the drain itself ends; the daemon's late drain takes over
    late = core(B, late=True)
    actions = late.start()
    assert actions == [term(B)]
    assert late.record.late
    assert late.record.processes[B.identity].late_arrival


def test_held_back_newcomers_are_not_signalled_and_keep_the_drain_open() -> None:
    c = core(A, B, already_signalled={A.identity: {TERM}})
    assert c.start(admit_new=False) == []  # A was signalled before the restart; B is new: held back
    assert B.identity not in c.record.processes
    c.observe_exit(A.identity, ExitStatus(code=0), T0 + 1)
    assert not c.done, "a held-back newcomer keeps the drain open until it is confirmed or the deadline"
    assert any("awaited confirmation" in n for n in c.record.notes)
    # Confirmed: the next scan signals it, once.
    actions = c.observe_scan([B], running=(), now=T0 + 2, admit_new=True)
    assert actions == [term(B)]
    assert c.record.processes[B.identity].late_arrival


def test_held_back_newcomers_are_never_signalled_past_the_deadline() -> None:
    c = core(A, B, already_signalled={A.identity: {TERM}})
    c.start(admit_new=False)
    actions = c.observe_scan([A, B], running=(), now=T0 + GRACE, admit_new=False)
    assert actions == [kill(A)]  # the kill of the one signalled before; B untouched
    assert B.identity not in c.record.processes


def test_a_restart_with_only_newcomers_signals_nobody_until_confirmed() -> None:
    c = core(B, already_signalled={A.identity: {TERM}})
    assert c.start(admit_new=False) == []
    assert not c.done
    c.cancel(T0 + 1)  # the event turned out to be over
    assert c.record.outcome is Outcome.CANCELLED
    assert c.record.processes == {}


def test_a_sigterm_possibly_sent_is_never_sent_again_and_waits_for_confirmation_to_be_killed() -> None:
    """A SIGTERM on file only as an intent (a crash between the write-ahead and the send)."""
    c = core(A, already_signalled={A.identity: {TERM}}, possibly_signalled=frozenset({A.identity}))
    assert c.start(admit_new=False) == []  # not the kill of a process signalled before: held back
    assert A.identity not in c.record.processes
    assert c.observe_scan([A], running=(), now=T0 + GRACE, admit_new=False) == []  # unconfirmed: no SIGKILL
    assert c.done
    assert A.identity not in c.record.processes
    # Confirmed later: the daemon's late-arrival drain takes it on, past the deadline: the kill, no SIGTERM.
    plan = DrainPlan(
        deadline=T0 + GRACE, late=True, already_signalled={A.identity: {TERM}},
        possibly_signalled=frozenset({A.identity}),
    )  # fmt: skip
    late = DrainCore([A], plan, now=T0 + GRACE + 1, now_wall=1.7e9)
    assert late.start(admit_new=True) == [kill(A)]


def test_a_sigterm_possibly_sent_is_not_sent_again_once_admitted() -> None:
    c = core(A, already_signalled={A.identity: {TERM}}, possibly_signalled=frozenset({A.identity}))
    assert c.start(admit_new=True) == []
    assert A.identity in c.record.pending()


def test_a_newcomer_while_killing_gets_sigterm_and_sigkill_in_one_wave() -> None:
    c = started(A)
    sent_all(c, c.observe_scan([A], running=(), now=T0 + GRACE), T0 + GRACE)  # A: SIGKILL, still dying
    assert c.phase is Phase.KILLING
    assert c.wants_scan(T0 + GRACE + 1)
    actions = c.observe_scan([A, B], running=(), now=T0 + GRACE + 9)
    assert actions == [term(B), kill(B)]  # A is not killed twice
    assert c.record.processes[B.identity].late_arrival
    sent_all(c, actions, T0 + GRACE + 9)
    c.observe_time(T0 + GRACE + 12)
    assert not c.done, "the kill wait runs from the newcomer's SIGKILL"
    c.observe_exit(A.identity, ExitStatus(signal=9), T0 + GRACE + 12)
    c.observe_exit(B.identity, ExitStatus(signal=9), T0 + GRACE + 12)
    assert c.record.outcome is Outcome.TIMED_OUT


def test_while_killing_a_newcomer_held_back_is_never_signalled() -> None:
    c = core(A, already_signalled={A.identity: {TERM}})
    c.start(admit_new=False)
    assert c.observe_scan([A], running=(), now=T0 + GRACE, admit_new=False) == [kill(A)]
    sent_all(c, [kill(A)], T0 + GRACE)
    assert c.observe_scan([A, C], running=(), now=T0 + GRACE + 1, admit_new=False) == []
    assert C.identity not in c.record.processes
