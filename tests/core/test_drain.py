"""The drain state machine, transition by transition: no processes, no clock, just observations in and
actions out."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.drain_core import GRACE, KILL, T0, TERM, A, B, C, core, kill, sent_all, started, term
from watchdog.core.drain import (
    DrainCore,
    DrainPlan,
    End,
    ExitStatus,
    Outcome,
    Phase,
    SendSignal,
    SignalResult,
)
from watchdog.core.drain_record import Loss
from watchdog.core.process import ProcessIdentity
from watchdog.core.vocabulary import SigtermDisposition


def test_no_holders_is_done_at_once() -> None:
    c = core()
    assert c.start() == []
    assert c.done
    assert c.record.outcome is Outcome.NO_HOLDERS


def test_start_sigterms_every_holder_once() -> None:
    c = core(A, B)
    assert c.start() == [term(A), term(B)]
    assert not c.done
    assert c.phase is Phase.WAITING


def test_a_holder_listed_twice_is_sigtermed_once() -> None:
    assert core(A, A).start() == [term(A)]


def test_all_exited_before_deadline_is_exited_with_statuses() -> None:
    c = started(A, B)
    c.observe_exit(A.identity, ExitStatus(code=0), T0 + 1)
    assert not c.done
    c.observe_exit(B.identity, ExitStatus(signal=15), T0 + 2)
    assert c.record.outcome is Outcome.EXITED
    assert c.record.ended == T0 + 2
    assert str(c.record.processes[A.identity].exit_status) == "exited 0"
    assert str(c.record.processes[B.identity].exit_status) == "killed by SIGTERM"
    assert c.record.processes[A.identity].signalled_at == T0


def test_already_signalled_are_not_sigtermed_again_but_are_waited_for() -> None:
    c = core(A, B, already_signalled={A.identity: {TERM}})
    assert c.start() == [term(B)]
    assert A.identity in c.pending()
    assert [s.at for s in c.record.processes[A.identity].signals] == [None]  # sent before the restart


def test_an_earlier_runs_signals_keep_the_times_they_went() -> None:
    """Given when each went (the state file's times), the record shows them there, as the history does."""
    c = core(A, B, already_signalled={A.identity: {TERM: T0 - 4.0}, B.identity: {TERM}})
    assert c.start() == []
    assert [s.at for s in c.record.processes[A.identity].signals] == [T0 - 4.0]
    assert c.record.processes[A.identity].signalled_at == T0 - 4.0
    assert [s.at for s in c.record.processes[B.identity].signals] == [None]  # not known: "before restart"


def test_gone_before_signal_and_identity_changed_end_without_signal() -> None:
    c = core(A, B)
    c.start()
    c.observe_signal(A.identity, TERM, SignalResult.GONE, T0)
    c.observe_signal(B.identity, TERM, SignalResult.IDENTITY_CHANGED, T0)
    assert c.record.processes[A.identity].end is End.GONE
    assert c.record.processes[B.identity].end is End.IDENTITY_CHANGED
    assert c.record.outcome is Outcome.EXITED


def test_denied_stays_pending() -> None:
    c = core(A)
    c.start()
    c.observe_signal(A.identity, TERM, SignalResult.DENIED, T0)
    assert c.pending() == [A.identity]
    assert c.record.processes[A.identity].signalled_at is None


def test_rescan_is_due_every_interval_and_at_the_deadline() -> None:
    c = started(A)
    assert not c.wants_scan(T0 + 0.5)
    assert c.timeout(T0 + 0.5) == pytest.approx(0.5)
    assert c.wants_scan(T0 + 1.0)
    c.observe_scan([A], running=(), now=T0 + 1.0)
    assert not c.wants_scan(T0 + 1.5)
    assert c.wants_scan(T0 + GRACE)
    c.observe_scan([A], running=(), now=T0 + GRACE - 0.5)
    assert c.timeout(T0 + GRACE - 0.25) == pytest.approx(0.25)  # the deadline comes before the next scan


def test_newcomer_is_sigtermed_once_under_the_same_deadline() -> None:
    c = started(A)
    actions = c.observe_scan([A, B], running=(), now=T0 + 1)
    assert actions == [term(B)]
    sent_all(c, actions, T0 + 1)
    assert c.observe_scan([A, B], running=(), now=T0 + 2) == []
    assert c.record.deadline == T0 + GRACE


def test_missing_from_scan_and_running_is_released_never_killed() -> None:
    c = started(A, B)
    c.observe_scan([B], running={A.identity}, now=T0 + 1)
    assert c.record.processes[A.identity].end is End.RELEASED
    actions = c.observe_scan([B], running=(), now=T0 + GRACE)
    assert actions == [kill(B)]


def test_missing_from_scan_but_exiting_stays_pending() -> None:
    c = started(A)
    c.observe_scan([], running=(), now=T0 + 1)
    assert c.pending() == [A.identity]


def test_released_then_holding_again_is_pending_again() -> None:
    c = started(A)
    c.observe_scan([], running={A.identity}, now=T0 + 1)
    assert c.record.outcome is Outcome.EXITED  # the only holder released: the drain is over
    c = started(A, B)
    c.observe_scan([B], running={A.identity}, now=T0 + 1)
    assert c.observe_scan([A, B], running=(), now=T0 + 2) == []  # no second SIGTERM
    assert c.record.processes[A.identity].pending
    assert any("again" in n for n in c.record.notes)


def test_deadline_kills_what_still_holds_then_waits_for_it() -> None:
    c = started(A, B)
    assert c.wants_scan(T0 + GRACE)
    actions = c.observe_scan([A, C], running={B.identity}, now=T0 + GRACE)
    # C is new at the deadline: its one SIGTERM, then the kill of what still holds a device, in one wave.
    term_c, kill_a, kill_c = (
        term(C),
        kill(A),
        kill(C),
    )
    assert actions == [term_c, kill_a, kill_c]
    assert c.record.processes[C.identity].late_arrival
    assert c.phase is Phase.KILLING
    sent_all(c, actions, T0 + GRACE)
    assert c.wants_scan(T0 + GRACE + 1)  # rescans go on while killing (tests/core/test_drain_newcomers.py)
    c.observe_exit(A.identity, ExitStatus(signal=9), T0 + GRACE + 0.1)
    c.observe_exit(C.identity, ExitStatus(signal=9), T0 + GRACE + 0.1)
    assert c.record.outcome is Outcome.TIMED_OUT
    assert c.record.processes[A.identity].killed
    assert not c.record.processes[B.identity].killed


def test_kill_wait_is_bounded() -> None:
    c = started(A)
    sent_all(c, c.observe_scan([A], running=(), now=T0 + GRACE), T0 + GRACE)
    assert c.timeout(T0 + GRACE + 0.5) == pytest.approx(0.5)  # the next rescan comes first
    assert c.observe_scan([A], running=(), now=T0 + GRACE + 9.5) == []  # A dying: killed once, not again
    assert c.timeout(T0 + GRACE + 9.6) == pytest.approx(0.4)  # then the end of the kill wait
    c.observe_time(T0 + GRACE + 9.9)
    assert not c.done
    c.observe_time(T0 + GRACE + 10)
    assert c.record.outcome is Outcome.TIMED_OUT
    assert any("still running after SIGKILL" in n for n in c.record.notes)


def test_everyone_released_at_the_deadline_is_exited_not_killed() -> None:
    c = started(A)
    assert c.observe_scan([], running={A.identity}, now=T0 + GRACE) == []
    assert c.record.outcome is Outcome.EXITED


def test_leave_only_reports_at_the_deadline() -> None:
    c = started(A, on_timeout="leave")
    assert c.observe_scan([A], running=(), now=T0 + GRACE) == []
    assert c.record.outcome is Outcome.TIMED_OUT
    assert c.record.processes[A.identity].pending


def test_failed_scan_releases_nobody_and_kills_running_pending_at_deadline() -> None:
    c = started(A, B)
    c.observe_scan(None, running={A.identity}, now=T0 + 1)
    assert set(c.pending()) == {A.identity, B.identity}
    assert c.observe_scan(None, running={A.identity}, now=T0 + GRACE) == [kill(A)]


def test_cancel_before_deadline_sends_nothing_more() -> None:
    c = started(A)
    c.cancel(T0 + 5)
    assert c.record.outcome is Outcome.CANCELLED
    assert c.observe_scan([A], running=(), now=T0 + GRACE) == []
    assert not c.wants_scan(T0 + GRACE)


def test_cancel_after_sigkill_stays_timed_out() -> None:
    c = started(A)
    sent_all(c, c.observe_scan([A], running=(), now=T0 + GRACE), T0 + GRACE)
    c.cancel(T0 + GRACE + 1)
    assert c.record.outcome is Outcome.TIMED_OUT


def test_cancel_at_deadline_before_sigkill_went_out_is_cancelled() -> None:
    c = started(A)
    c.observe_scan([A], running=(), now=T0 + GRACE)  # the edge saw cancel and sent nothing
    c.cancel(T0 + GRACE)
    assert c.record.outcome is Outcome.CANCELLED


def test_interrupt_keeps_what_was_sent_for_a_resume() -> None:
    c = started(A)
    c.interrupt(T0 + 3)
    assert c.record.outcome is Outcome.INTERRUPTED
    assert c.record.processes[A.identity].signalled_at == T0


def test_resume_past_deadline_kills_at_once_even_if_kill_was_intended_before() -> None:
    plan = DrainPlan(deadline=T0 - 1, already_signalled={A.identity: {TERM, KILL}, B.identity: {TERM}})
    c = DrainCore([A, B], plan, now=T0, now_wall=0.0)
    assert c.start() == [kill(A), kill(B)]


def test_dry_run_does_not_wait_after_the_would_be_kill() -> None:
    c = started(A, dry_run=True)
    actions = c.observe_scan([A], running=(), now=T0 + GRACE)
    assert actions == [kill(A)]
    assert c.record.outcome is Outcome.TIMED_OUT
    sent_all(c, actions, T0 + GRACE)
    assert c.record.processes[A.identity].killed  # would have been: the record is a dry run's
    assert c.record.dry_run


def test_kill_finds_it_gone_then_the_exit_status_fills_in() -> None:
    c = started(A)
    c.observe_scan([A], running=(), now=T0 + GRACE)
    c.observe_signal(A.identity, KILL, SignalResult.GONE, T0 + GRACE)
    assert c.record.processes[A.identity].end is End.EXITED
    c.observe_exit(A.identity, ExitStatus(code=0), T0 + GRACE)
    assert str(c.record.processes[A.identity].exit_status) == "exited 0"


def test_unknown_identities_are_ignored() -> None:
    c = started(A)
    c.observe_exit(B.identity, ExitStatus(code=0), T0 + 1)
    c.observe_signal(B.identity, TERM, SignalResult.SENT, T0 + 1)
    assert B.identity not in c.record.processes
    assert c.pending() == [A.identity]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"grace": -1}, "grace"), ({"rescan_interval": 0}, "rescan"), ({"kill_wait": -1}, "kill")],
)
def test_bad_settings_are_refused_with_the_name(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DrainPlan(deadline=1, **kwargs)  # type: ignore[arg-type]


# Any order of observations keeps the promises: SIGTERM at most once per process, never before it is
# seen; no SIGKILL before the deadline, after a cancel, or to a released process.
_steps = st.lists(
    st.tuples(
        st.sampled_from(["scan", "exit", "time", "cancel", "deny"]),
        st.sets(st.sampled_from([10, 20, 30])),
        st.floats(min_value=0, max_value=400),
    ),
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(steps=_steps)
def test_promises_hold_in_any_order(steps: list[tuple[str, set[int], float]]) -> None:
    c = core(A, B)
    terms: dict[ProcessIdentity, int] = {}
    cancelled = False
    released: set[ProcessIdentity] = set()
    now = T0

    def carry(actions: list[SendSignal], result: SignalResult = SignalResult.SENT) -> None:
        for a in actions:
            if a.signum == TERM:
                terms[a.identity] = terms.get(a.identity, 0) + 1
                assert terms[a.identity] == 1
            else:
                assert now >= c.record.deadline
                assert not cancelled
                assert a.identity not in released or c.record.processes[a.identity].pending
            c.observe_signal(a.identity, a.signum, result, now)

    carry(c.start())
    for kind, pids, dt in steps:
        now += dt / 10
        ids = {ProcessIdentity(p, 1) for p in pids}
        if kind == "scan" and c.wants_scan(now):
            hs = [h for h in (A, B, C) if h.identity in ids]
            running = {i for i in c.pending() if i not in ids}
            carry(c.observe_scan(hs, running, now))
            released |= {i for i in running if c.record.processes[i].end is End.RELEASED}
        elif kind == "exit":
            for i in ids:
                c.observe_exit(i, ExitStatus(code=0), now)
        elif kind == "time":
            c.observe_time(now)
        elif kind == "cancel":
            cancelled = cancelled or c.phase is Phase.WAITING
            c.cancel(now)
        elif kind == "deny" and c.wants_scan(now):
            carry(c.observe_scan([A, B, C], (), now), SignalResult.DENIED)
    if cancelled:
        assert c.record.outcome is Outcome.CANCELLED
        assert not any(p.killed for p in c.record.processes.values())


def test_the_deadline_moves_earlier_but_never_later() -> None:
    c = started(A)
    assert not c.move_deadline(T0 + GRACE + 60, T0 + 1)
    assert c.record.deadline == T0 + GRACE
    assert c.move_deadline(T0 + 25, T0 + 1)  # a preemption arrives during a maintenance drain
    assert c.record.deadline == T0 + 25
    # At the new deadline the rescan escalates: A still holds the device, so it is SIGKILLed.
    assert c.observe_scan([A], running=(), now=T0 + 25) == [kill(A)]


def test_a_finished_drain_keeps_its_deadline() -> None:
    c = started(A)
    c.observe_exit(A.identity, ExitStatus(code=0), T0 + 2)
    assert c.done
    assert not c.move_deadline(T0 + 1, T0 + 3)


def test_each_process_keeps_the_sigterm_disposition_it_was_first_seen_with() -> None:
    """Known before any signal (readiness): the record carries it, so a death whose status is unreadable
    can still be told (tests/core/test_drain_record.py)."""
    default = dataclasses.replace(A, sigterm=SigtermDisposition.DEFAULT)
    c = started(default, B)
    assert c.record.processes[A.identity].sigterm is SigtermDisposition.DEFAULT
    assert c.record.processes[B.identity].sigterm is None  # /proc did not say
    c.observe_exit(A.identity, ExitStatus(), T0 + 0.1)  # reaped by its parent: status unknown
    assert c.record.processes[A.identity].loss() is Loss.SIGTERM_DEFAULT
