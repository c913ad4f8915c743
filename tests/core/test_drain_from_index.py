"""A drain started from the warm holder index (`scan_first`): the indexed holders are signalled at once, then
the holders among the processes the index had not seen, the full scan is due straight away, and the drain
cannot end before that scan has looked."""

from __future__ import annotations

from tests.support.drain_core import T0, TERM, A, B, core, sent_all, term
from watchdog.core.drain import FIRST_SCAN_RETRY, ExitStatus, Outcome, Phase


def test_indexed_holders_are_signalled_at_once_and_the_full_scan_is_due_straight_away() -> None:
    c = core(A, scan_first=True)
    actions = c.start()
    assert actions == [term(A)]
    sent_all(c, actions, T0)
    assert c.wants_scan(T0)
    assert c.timeout(T0) == 0.0


def test_the_drain_waits_for_the_full_scan_even_when_every_indexed_holder_has_exited() -> None:
    c = core(A, scan_first=True)
    sent_all(c, c.start(), T0)
    c.observe_exit(A.identity, ExitStatus(code=0), T0 + 0.001)
    assert not c.done  # B may hold a device too: only the full scan can tell
    actions = c.observe_scan([B], running=(), now=T0 + 0.01)
    assert actions == [term(B)]
    assert not c.record.processes[B.identity].late_arrival  # found by the drain's first full look
    sent_all(c, actions, T0 + 0.01)
    c.observe_exit(B.identity, ExitStatus(code=0), T0 + 0.5)
    assert c.record.outcome is Outcome.EXITED


def test_after_the_full_scan_newcomers_are_late_arrivals_and_scans_are_every_interval_again() -> None:
    c = core(A, scan_first=True)
    sent_all(c, c.start(), T0)
    assert c.observe_scan([A], running=(), now=T0 + 0.01) == []  # already signalled: no second SIGTERM
    assert not c.wants_scan(T0 + 0.5)
    assert c.wants_scan(T0 + 1.01)
    (late,) = c.observe_scan([A, B], running=(), now=T0 + 1.01)
    assert late == term(B)
    assert c.record.processes[B.identity].late_arrival


def test_a_failed_full_scan_is_tried_again_soon_and_ends_nothing() -> None:
    c = core(A, scan_first=True)
    sent_all(c, c.start(), T0)
    c.observe_exit(A.identity, ExitStatus(code=0), T0 + 0.001)
    assert c.observe_scan(None, running=(), now=T0 + 0.01) == []
    assert not c.done
    assert not c.wants_scan(T0 + 0.01 + FIRST_SCAN_RETRY / 2)
    assert c.wants_scan(T0 + 0.01 + FIRST_SCAN_RETRY)
    c.observe_scan([], running=(), now=T0 + 0.3)
    assert c.record.outcome is Outcome.EXITED


def test_an_empty_index_start_waits_and_a_scan_finding_nobody_is_no_holders() -> None:
    c = core(scan_first=True)
    assert c.start() == []
    assert not c.done
    c.observe_scan([], running=(), now=T0 + 0.01)
    assert c.record.outcome is Outcome.NO_HOLDERS


def test_past_the_deadline_the_full_scan_decides_the_kill() -> None:
    c = core(A, scan_first=True)
    c.record.deadline = T0  # resumed at its deadline
    assert c.start() == []  # the index alone never decides a SIGKILL
    actions = c.observe_scan([A, B], running=(), now=T0)
    assert c.phase is Phase.KILLING
    assert {a.identity for a in actions if a.signum != TERM} == {A.identity, B.identity}
