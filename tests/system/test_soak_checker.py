"""The soak's checker (bench/soak_checker.py) on synthetic facts: a clean run passes, and each broken
promise is reported, judged from ground truth (what the fake served, what each holder received, deaths,
the driver's own starts and kills), never from what the daemon's log or state file say it believed: a
daemon that never acts, hears late, forgets a SIGKILL, signals after a clear, or lets a holder outlast
its restarts is caught whatever it logged. Also the parsers of the daemon's log and of the holders' log."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench.soak_checker import TERM_BOUND, Verdict, check, percentiles
from bench.soak_facts import (
    Episode,
    Facts,
    HolderFacts,
    Instance,
    LogLine,
    Served,
    facts_json,
    load_facts,
    parse_daemon_log,
    read_holder_lines,
    timeline,
)

T0 = 1_800_000_000.0
PREEMPTED = "instance/preempted"


def line(at: float, kind: str, instance: int = 1, **fields: object) -> LogLine:
    return LogLine(T0 + at, kind, f"{kind} {fields}", fields, instance)


def sent(at: float, pid: int, signame: str, instance: int = 1) -> LogLine:
    return line(at, "signal_sent", instance, pid=pid, start_time=500 + pid, signal=signame, result="sent")


def served(at: float, value: str, arrived: float | None = None, note: str = "") -> Served:
    """The fake's answer to a request for instance/preempted that arrived at t+`arrived` (hanging)."""
    return Served(T0 + (at - 0.5 if arrived is None else arrived), T0 + at, PREEMPTED, 200, value, note)


def holder(serial: int, pid: int, mode: str, opened: float, **facts: object) -> HolderFacts:
    made = HolderFacts(serial, pid, mode, T0 + opened - 0.2, opened=T0 + opened, start_time=500 + pid)
    for name, value in facts.items():
        setattr(made, name, value)
    return made


def run(
    index: int, started: float, ready: float, ended: float = 30.0, told: str | None = "final"
) -> Instance:
    """Daemon run #`index` (pid 100 * index), started, READY=1 and ended at those t+ seconds."""
    code = -9 if told == "kill" else 0
    return Instance(index, 100 * index, T0 + started, Path(f"daemon-{index}.log"), ready=T0 + ready,
                    ended=T0 + ended, exit_code=code, told=told)  # fmt: skip


def clean() -> Facts:
    """A preemption set at t+10 (grace 3 s), served to daemon #1 (up all along) at t+10.00: the deadline is
    t+13; cleared at t+16, served back at t+16.02. Holder #1 (handled) exits on its SIGTERM, holder #2
    (report) carries on and is SIGKILLed at the deadline. The daemon's log says the same (for the
    timeline only)."""
    facts = Facts(t0=T0, end=T0 + 30)
    facts.episodes.append(Episode(1, "preempted", T0 + 10, 3.0, T0 + 16, deadlines=[(T0 + 10.1, T0 + 13)]))
    facts.served = [
        served(0.1, "FALSE", arrived=0.05),
        served(10.0, "TRUE", arrived=5.0),
        served(16.02, "FALSE"),
    ]
    daemon = run(1, 0.0, 0.5)
    daemon.lines = [
        line(0.4, "daemon_started"),
        line(10.05, "event_started", event="preempted"),
        line(10.06, "drain_started"),
        sent(10.07, 11, "SIGTERM"),
        sent(10.07, 12, "SIGTERM"),
        sent(13.0, 12, "SIGKILL"),
        line(13.02, "drain_finished", outcome="timed_out"),
        line(16.05, "event_cleared", event="preempted"),
    ]
    facts.instances.append(daemon)
    facts.holders += [
        holder(1, 11, "handled", 1.2, terms=[T0 + 10.08], died=T0 + 10.09, exit_code=0),
        holder(2, 12, "report", 2.2, terms=[T0 + 10.08], died=T0 + 13.01, exit_code=-9),
    ]
    return facts


def killed(facts: Facts, at: float) -> None:
    """Daemon #1 of `facts` is killed (kill -9) at t+`at`: its log ends there."""
    first = facts.instances[0]
    first.ended, first.exit_code, first.told, first.told_at = T0 + at, -9, "kill", T0 + at
    first.lines = [x for x in first.lines if x.at < T0 + at]


def texts(verdict: Verdict) -> list[str]:
    return [v.text for v in verdict.violations]


def only(verdict: Verdict, *words: str) -> str:
    """The one violation, which must name every word."""
    assert len(verdict.violations) == 1, texts(verdict)
    text = verdict.violations[0].text
    assert all(word in text for word in words), text
    return text


def test_a_clean_run_has_no_violation_and_times_its_signals_from_the_event_as_served() -> None:
    verdict = check(clean())
    assert texts(verdict) == []
    assert verdict.kill_offsets == [0.01]
    assert verdict.term_latencies == [0.08, 0.08]
    assert (verdict.counts["sigterms"], verdict.counts["sigkills"]) == (2, 1)
    assert percentiles([0.1, 0.3, 0.2]) == (0.2, 0.3, 0.3)


# -- the six cases a checker reading the daemon's own beliefs passed (each fails on it) ------------------


def test_a_daemon_that_never_acts_on_an_event_it_was_served_is_reported() -> None:
    """Served TRUE at t+10, the daemon logs nothing of it and signals nobody: both holders were owed their
    SIGTERM by t+10+TERM_BOUND, holder #2 its SIGKILL at t+13."""
    facts = clean()
    facts.instances[0].lines = facts.instances[0].lines[:1]
    for h in facts.holders:
        h.terms, h.died, h.exit_code = [], None, None
    facts.holders[0].died, facts.holders[0].exit_code = T0 + 11.5, 0  # holder #1 left on its own
    found = texts(check(facts))
    assert len(found) == 3, found
    assert all("daemon #1 was served the preempted event #1 of t+10.0 s at t+10.00 s; no SIGTERM" in t
               for t in found[:2])  # fmt: skip
    assert "pid 12 (holder #2, report) still held the device 1 s after its SIGKILL was due" in found[2]


def test_an_event_heard_8_s_late_is_reported_for_its_sigterms_and_its_sigkill() -> None:
    """The daemon's log and state file say it heard at t+18 (deadline t+21): it was served at t+10, so its
    SIGTERMs are 8 s late and its SIGKILL, due at t+13, comes 8 s after."""
    facts = clean()
    facts.episodes[0].cleared = T0 + 24
    facts.episodes[0].deadlines = [(T0 + 18.1, T0 + 21)]
    facts.served[-1] = served(24.02, "FALSE")
    facts.instances[0].lines = [
        line(0.4, "daemon_started"),
        line(18.0, "event_started", event="preempted"),
        sent(18.07, 11, "SIGTERM"),
        sent(18.07, 12, "SIGTERM"),
        sent(21.0, 12, "SIGKILL"),
    ]
    one, two = facts.holders
    one.terms, one.died = [T0 + 18.08], T0 + 18.09
    two.terms, two.died = [T0 + 18.08], T0 + 21.01
    found = texts(check(facts))
    assert len(found) == 4, found
    assert "its first signal came 8.08 s after" in found[0]
    assert "its first signal came 8.08 s after" in found[1]
    assert "pid 11 (holder #1, handled) still held the device 1 s after its SIGKILL was due" in found[2]
    assert "SIGKILL of pid 12 (holder #2, report) 8.01 s after its window t+13.00..t+13.00 s" in found[3]


def test_a_post_deadline_arrival_sigtermed_but_never_sigkilled_is_reported() -> None:
    """Past the deadline a late arrival gets SIGTERM and SIGKILL in one wave: a SIGTERM alone is a miss."""
    facts = clean()
    facts.episodes[0].cleared = T0 + 20
    facts.served[-1] = served(20.02, "FALSE")
    facts.holders.append(holder(3, 13, "report", 14.0, terms=[T0 + 14.9]))
    facts.instances[0].lines.append(sent(14.89, 13, "SIGTERM"))
    only(check(facts), "pid 13", "after its SIGKILL was due", "was not SIGKILLed")


def test_a_sigterm_9_s_after_a_clear_the_daemon_was_served_is_reported() -> None:
    """The daemon never logged hearing the clear; the fake served it at t+16.02: a SIGTERM at t+25 is no
    late news but a daemon acting on an event it was told was over."""
    facts = clean()
    del facts.instances[0].lines[-1]
    facts.holders.append(holder(3, 13, "report", 20.0, terms=[T0 + 25.0]))
    facts.instances[0].lines.append(sent(24.99, 13, "SIGTERM"))
    only(check(facts), "SIGTERM to pid 13", "9.0 s after daemon #1 was served the clear")


def test_a_holder_that_outlasts_restarts_each_shorter_than_the_old_allowance_is_reported() -> None:
    """Daemon #1 is served at t+10 and killed at t+12; #2, up at t+12.1, is served at t+12.5 and killed at
    t+14.5; #3 is served at t+15: holder #3 held the device through all of it without a SIGTERM, and each
    run knew of the event for under 2.5 s. Daemon #1 had TERM_BOUND to signal it."""
    facts = clean()
    facts.holders = [holder(3, 13, "report", 5.0)]
    killed(facts, 12)
    second, third = run(2, 12.1, 12.4, ended=14.5, told="kill"), run(3, 14.6, 14.9)
    second.told_at, facts.instances[0].lines = T0 + 14.5, []
    facts.instances += [second, third]
    facts.served += [served(12.5, "TRUE", arrived=12.3), served(15.0, "TRUE", arrived=14.8)]
    facts.served.append(served(16.02, "FALSE", arrived=15.5))
    facts.holders[0].released = T0 + 16.0  # it let go with the clear
    facts.episodes[0].grace = 10.0  # no SIGKILL at stake here: the deadline is past the clear
    only(check(facts), "pid 13", f"{TERM_BOUND:.1f} s after daemon #1 was served", "no SIGTERM")


def test_a_holder_of_2_4_s_with_the_event_served_is_owed_its_sigterm() -> None:
    facts = clean()
    facts.holders.append(holder(3, 13, "release", 10.0, released=T0 + 12.4))
    only(check(facts), "pid 13", "daemon #1 was served the preempted event #1", "no SIGTERM")


# -- what the checker caught before, from ground truth now ----------------------------------------------


def test_an_answer_that_finishes_after_the_clear_still_served_the_event() -> None:
    """A trickled answer with the event's value, taken at t+10, reaches the daemon only at t+16.5, after the
    clear at t+16: the daemon is served the event then, and its SIGTERM at once is no stray signal."""
    facts = clean()
    facts.served[1] = served(16.5, "TRUE", arrived=5.0, note="fault:trickle")
    facts.served[-1] = served(17.02, "FALSE", arrived=16.6)
    facts.holders = [holder(1, 11, "handled", 1.2, terms=[T0 + 16.52], died=T0 + 16.53, exit_code=0)]
    assert texts(check(facts)) == []


def test_a_second_sigterm_in_one_event_is_reported() -> None:
    facts = clean()
    facts.holders[1].terms.append(T0 + 11.0)
    only(check(facts), "second SIGTERM to pid 12", "first at t+10.08")


def test_a_sigterm_outside_any_event_is_reported() -> None:
    facts = clean()
    facts.holders.append(holder(3, 13, "release", 3.0, terms=[T0 + 5.0], released=T0 + 5.01))
    only(check(facts), "SIGTERM to pid 13", "outside any event")


def test_a_sigterm_before_the_daemon_was_served_the_event_is_reported() -> None:
    facts = clean()
    facts.holders.append(holder(3, 13, "release", 3.0, terms=[T0 + 9.99], released=T0 + 10.0))
    facts.episodes[0].started = T0 + 9.9
    only(check(facts), "SIGTERM to pid 13", "by daemon #1 before it was served the preempted event #1")


def test_a_sigterm_long_after_a_clear_the_daemon_was_not_served_yet_is_no_violation() -> None:
    """Faults kept the clear from the daemon until t+26: a SIGTERM at t+25 is late news, not a daemon bug."""
    facts = clean()
    facts.served[-1] = served(26.0, "FALSE")
    facts.holders.append(holder(3, 13, "report", 20.0, terms=[T0 + 25.0]))
    assert texts(check(facts)) == []


def test_an_answer_a_fault_spoiled_does_not_serve_the_event() -> None:
    """The value came without its Metadata-Flavor header: a daemon must refuse it, so it owes nothing yet."""
    facts = clean()
    facts.served[1] = served(10.0, "TRUE", arrived=5.0, note="fault:no_flavor")
    facts.served.insert(2, served(11.0, "TRUE", arrived=10.1))
    for h in facts.holders:
        h.terms = [T0 + 11.08]
    verdict = check(facts)
    assert texts(verdict) == []
    assert verdict.term_latencies == [0.08, 0.08]
    assert verdict.kill_offsets == [
        -0.99
    ]  # the deadline is t+14 now: a SIGKILL at t+13.01 is early, within 1 s


def test_a_sigterm_while_no_daemon_ran_is_reported() -> None:
    facts = clean()
    facts.end = T0 + 40
    facts.holders.append(holder(3, 13, "report", 14.0, terms=[T0 + 35.0]))
    found = texts(check(facts))
    assert any("SIGTERM to pid 13" in t and "while no daemon ran" in t for t in found), found


def test_a_late_arrival_that_never_gets_its_sigterm_is_reported() -> None:
    """The drain's holders were signalled at t+10.08; a restarted job opens the device at t+11 and holds it
    to t+13.5: a scan (RESCAN) and TERM_BOUND later it was owed its SIGTERM."""
    facts = clean()
    facts.holders.append(holder(3, 13, "handled", 11.0, died=T0 + 13.5, exit_code=0))
    text = only(check(facts), "pid 13", "no SIGTERM", "(a late arrival; daemon #1 was served")
    assert "still held the device 2.0 s after it opened it at t+11.00 s" in text
    assert check(facts).counts["late_arrivals"] == 1


def test_a_late_arrival_is_owed_nothing_while_no_daemon_was_served_the_event() -> None:
    facts = clean()
    del facts.served[1]  # faults: the value never reached the daemon
    facts.holders.append(holder(3, 13, "handled", 14.5))
    assert not [t for t in texts(check(facts)) if "pid 13" in t]


def test_a_late_sigkill_is_reported() -> None:
    facts = clean()
    facts.holders[1].died = T0 + 14.5
    only(check(facts), "SIGKILL of pid 12", "1.50 s after its window t+13.00..t+13.00 s")


def test_a_late_reaper_is_a_late_sigkill_whatever_the_daemon_logged() -> None:
    """The daemon's log says it sent the SIGKILL on time; the holder died 1.5 s late: no evidence, the log."""
    facts = clean()
    facts.holders[1].died = T0 + 14.5
    only(check(facts), "SIGKILL of pid 12", "after its window")


def test_a_holder_never_sigkilled_at_its_deadline_is_reported() -> None:
    facts = clean()
    facts.holders[1].died, facts.holders[1].exit_code = None, None
    only(check(facts), "pid 12", "was not SIGKILLed")


def test_an_early_clear_cancels_the_sigkill_and_forbids_one() -> None:
    facts = clean()
    facts.episodes[0].cleared = T0 + 11.5
    facts.served[-1] = served(11.52, "FALSE")
    only(check(facts), "SIGKILL of pid 12", "outside any event's SIGKILL window")
    facts.holders[1].died, facts.holders[1].exit_code = None, None
    assert texts(check(facts)) == []


def test_no_daemon_at_the_deadline_moves_the_sigkill_to_the_next_start() -> None:
    """Daemon #1 is killed at t+12; #2 starts at t+14, resumes the drain and is READY at t+15.5: holder #2,
    SIGTERMed by #1, is due its SIGKILL between t+14 and READY=1 + 1 s, heard or not."""
    facts = clean()
    killed(facts, 12)
    facts.instances.append(run(2, 14.0, 15.5))
    facts.holders[1].died = T0 + 15.1
    verdict = check(facts)
    assert texts(verdict) == []
    assert (verdict.kill_offsets, verdict.counts["restart_kills"]) == ([], 1)
    facts.holders[1].died = T0 + 16.6
    only(check(facts), "SIGKILL of pid 12", "1.10 s after its window t+13.00..t+15.50 s")


def test_a_restarted_daemon_still_starting_at_the_deadline_kills_as_it_resumes() -> None:
    """Daemon #1 is killed at t+12.9; #2, spawned at t+12.95, is still starting at the t+13 deadline and
    resumes the drain at t+14.4 (READY=1 at t+14.5): its SIGKILL then is on time, not 1.4 s late. Daemon #2
    READY before the deadline kills at the deadline."""
    facts = clean()
    killed(facts, 12.9)
    facts.instances.append(run(2, 12.95, 14.5))
    facts.served.insert(2, served(14.45, "TRUE", arrived=14.42))
    facts.served[-1] = served(16.02, "FALSE", arrived=15.0)
    facts.holders[1].died = T0 + 14.4
    verdict = check(facts)
    assert texts(verdict) == []
    assert verdict.counts["restart_kills"] == 1
    facts.instances[1].ready = T0 + 12.99
    only(check(facts), "SIGKILL of pid 12", "1.40 s after its window t+13.00..t+13.00 s")


def test_signals_after_a_clear_while_down_are_reported() -> None:
    """Daemon #1 is killed mid-drain, the event cleared while it is down, a new job opens the device, and
    daemon #2 resumes the drain from its state file: it SIGTERMs the new job without a fresh answer."""
    facts = clean()
    killed(facts, 12)
    episode = facts.episodes[0]
    episode.cleared, episode.cleared_while_down = T0 + 12.1, True
    facts.served[-1] = served(13.5, "FALSE", arrived=12.6)  # daemon #2's first answer (faults before)
    facts.instances.append(run(2, 12.3, 13.6))
    facts.holders.append(holder(3, 13, "report", 12.2, after_clear=True, terms=[T0 + 12.51]))
    verdict = check(facts)
    # The new job's SIGTERM is a breach; the SIGKILL of pid 12 at the deadline, SIGTERMed by daemon #1
    # before the crash, is not: a process already signalled keeps its deadline and its SIGKILL (daemon #2,
    # not READY by the deadline, may send it as it resumes the drain).
    only(verdict, "SIGTERM to pid 13", "by daemon #2, which resumed", "without a fresh metadata answer")
    assert verdict.counts["jobs_after_clear_signalled"] == 1
    assert verdict.counts["restart_kills"] == 1


def test_a_daemon_killed_while_a_sigterm_was_owed_excuses_it() -> None:
    """Daemon #1, served at t+10, is killed at t+10.3, before holder #3's SIGTERM was due: it may have
    written it ahead and died before sending it, and daemon #2 never sends it again. Holder #3 is then
    SIGKILLed like a newcomer: at the deadline, #2 having been served the event itself."""
    facts = clean()
    killed(facts, 10.3)
    facts.instances.append(run(2, 10.4, 11.0))
    facts.served += [served(11.5, "TRUE", arrived=11.2), served(16.03, "FALSE", arrived=12.0)]
    facts.holders.append(holder(3, 13, "report", 5.0, died=T0 + 13.02, exit_code=-9))
    verdict = check(facts)
    assert texts(verdict) == []
    assert verdict.counts["possibly_sent"] == 1
    assert verdict.kill_offsets == [0.01, 0.02]


def test_a_newcomer_to_a_restarted_daemon_never_served_the_event_is_owed_no_sigkill() -> None:
    """Daemon #1 is killed at t+10.2 mid-drain; #2 resumes it at t+10.3 and every answer is a fault (the
    event is never served to it, and its 10 s wait ends past the deadline); holder #3 opens the device at
    t+10.4, still there at the t+13 deadline: an unconfirmed event signals nobody new past it. Holder #2,
    SIGTERMed before the crash, is still SIGKILLed on time."""
    facts = clean()
    killed(facts, 10.2)
    facts.instances.append(run(2, 10.3, 12.3))
    facts.served[-1] = served(16.05, "FALSE", arrived=15.0)
    facts.holders.append(holder(3, 13, "report", 10.4))
    verdict = check(facts)
    assert texts(verdict) == []
    assert verdict.kill_offsets == [0.01]
    facts.holders[2].died, facts.holders[2].exit_code = T0 + 13.0, -9
    only(check(facts), "SIGKILL of pid 13", "outside any event's SIGKILL window")


def restarted_at_the_deadline(told: str | None) -> Facts:
    """Daemon #1 is reaped at t+13.4 (told to stop at t+12.8, or not told); daemon #2, started at t+13.5,
    is READY at t+17 (a slow start) and SIGKILLs holder #2 at t+17.03 as it resumes the drain."""
    facts = clean()
    first = facts.instances[0]
    first.ended, first.told, first.exit_code = T0 + 13.4, told, 0
    first.told_at = T0 + 12.8 if told else None
    first.lines = [x for x in first.lines if x.at < T0 + 12.9]
    facts.instances.append(run(2, 13.5, 17.0))
    facts.episodes[0].cleared = T0 + 17.8
    facts.served[-1] = served(17.82, "FALSE", arrived=17.5)
    facts.holders[1].died = T0 + 17.03
    return facts


def two_deadlines(served_again: float) -> Facts:
    """Daemon #1 is served the preemption at t+10, SIGTERMs both holders and is killed at t+10.5, maybe
    before its state file had the event; #2 (up at t+11, READY at t+11.5) is served it at `served_again`:
    the SIGKILL is due at t+13 (#1's event on file) or at `served_again` + 3 (it was not). The clear comes
    at t+20."""
    facts = clean()
    killed(facts, 10.5)
    facts.instances.append(run(2, 11.0, 11.5))
    facts.episodes[0].cleared = T0 + 20
    facts.served[2:] = [served(served_again, "TRUE", arrived=11.2), served(20.02, "FALSE", arrived=19.0)]
    return facts


def test_a_sigkill_between_two_possible_deadlines_is_late() -> None:
    """Deadlines t+13 and t+15.5 make a window of t+12..t+16.5 wide; a SIGKILL at t+14.25 is neither: late."""
    facts = two_deadlines(12.5)
    for died in (13.02, 15.52):
        facts.holders[1].died = T0 + died
        verdict = check(facts)
        assert texts(verdict) == []
        assert verdict.kill_offsets == [0.02]
    facts.holders[1].died = T0 + 14.25
    only(check(facts), "SIGKILL of pid 12", "1.25 s from its deadline", "t+13.00 s, t+15.50 s")


def test_a_newcomer_found_past_the_first_deadline_is_killed_as_found_and_not_timed() -> None:
    """Holder #3 opens at t+10.7, while no daemon runs; #2 is served the event at t+13.5, past #1's t+13
    deadline: it may take holder #3 on at its next scan, SIGTERM and SIGKILL in one wave (t+14.8: 1.8 s and
    1.7 s from the deadlines t+13 and t+16.5, no offset from either). At t+16.5, 3 s after, it is late."""
    facts = two_deadlines(13.5)
    facts.holders.append(holder(3, 13, "report", 10.7, terms=[T0 + 14.79], died=T0 + 14.8, exit_code=-9))
    verdict = check(facts)
    assert texts(verdict) == []
    assert verdict.kill_offsets == [0.01]
    assert verdict.counts["late_kills_untimed"] == 1
    facts.holders[2].terms, facts.holders[2].died = [T0 + 16.49], T0 + 16.5
    only(check(facts), "pid 13", "still held the device 2.0 s after daemon #2 was served")


def test_a_sigkill_due_while_a_told_daemon_stops_is_due_when_the_next_one_is_up() -> None:
    verdict = check(restarted_at_the_deadline("stop"))
    assert texts(verdict) == []
    assert verdict.counts["restart_kills"] == 1


def test_a_sigkill_a_daemon_running_through_the_deadline_did_not_send_is_late() -> None:
    """Not told to stop, daemon #1 ran on past the deadline: the SIGKILL was its to send, 4 s earlier."""
    facts = restarted_at_the_deadline(None)
    facts.instances[0].ended = facts.instances[0].told_at = T0 + 15.0
    facts.instances[0].told = "kill"
    facts.instances[1].started = T0 + 15.1
    only(check(facts), "SIGKILL of pid 12", "4.03 s after its window t+13.00..t+13.00 s")


def test_a_daemon_killed_just_after_its_deadline_may_have_killed_a_late_arrival_at_it() -> None:
    """Holder #3 opens at t+12.5; daemon #1 SIGKILLs it with the rest at the t+13 deadline and is killed at
    t+13.4; #2, served the event only at t+15, would have killed it later: the kill at t+13 is on time."""
    facts = clean()
    killed(facts, 13.4)
    facts.instances.append(run(2, 13.5, 14.0))
    facts.served.insert(2, served(15.0, "TRUE", arrived=14.1))
    facts.served[-1] = served(16.02, "FALSE", arrived=15.5)
    facts.holders.append(holder(3, 13, "report", 12.5, died=T0 + 13.02, exit_code=-9))
    assert texts(check(facts)) == []


def test_a_clear_served_to_one_run_before_the_deadline_leaves_the_next_owing_nothing() -> None:
    """Daemon #1 is killed at t+11; #2 resumes the drain and is served the clear at t+11.6 (the drain is
    cancelled), killed at t+12; #3, up from t+12.1, is served nothing (faults): holder #2, SIGTERMed by #1
    and still holding at the t+13 deadline, is owed no SIGKILL from anyone."""
    facts = clean()
    killed(facts, 11)
    second = run(2, 11.1, 11.65, ended=12.0, told="kill")
    second.told_at = T0 + 12.0
    facts.instances += [second, run(3, 12.1, 12.6)]
    facts.episodes[0].cleared = T0 + 11.5
    facts.served[-1] = served(11.6, "FALSE", arrived=11.4)
    facts.holders[1].died, facts.holders[1].exit_code = None, None  # (#3's answers were all faults)
    assert texts(check(facts)) == []


def test_a_clear_served_as_the_daemon_stops_may_not_have_reached_its_state_file() -> None:
    """Daemon #1, told to stop at t+11.55, is served the clear at t+11.6: it may not have written it down.
    Daemon #2, up at t+11.8 and slow to start, resumes the drain at t+14 past the deadline and SIGKILLs holder
    #2, which #1 had SIGTERMed: allowed (heard or not, a resumed drain kills); not doing so is allowed too."""
    facts = clean()
    first = facts.instances[0]
    first.told, first.told_at, first.ended = "stop", T0 + 11.55, T0 + 11.7
    first.lines = [x for x in first.lines if x.at < T0 + 11.55]
    facts.instances.append(run(2, 11.8, 14.5))
    facts.episodes[0].cleared = T0 + 11.5
    facts.served[-1] = served(11.6, "FALSE", arrived=5.0)
    facts.served.append(served(14.4, "FALSE", arrived=14.3))
    facts.holders[1].died = T0 + 14.0
    assert texts(check(facts)) == []
    facts.holders[1].died, facts.holders[1].exit_code = None, None
    assert texts(check(facts)) == []


def test_a_daemon_told_to_stop_just_before_its_deadline_may_still_kill_at_it() -> None:
    """Told at t+12.8, daemon #1 reached its deadline (t+13) before it handled the stop and SIGKILLed
    holder #2 then: on time."""
    facts = restarted_at_the_deadline("stop")
    facts.holders[1].died = T0 + 13.06
    assert texts(check(facts)) == []


def test_the_fake_losing_answers_is_reported() -> None:
    facts = clean()
    facts.served_complete = False
    only(check(facts), "request log overflowed")


@pytest.mark.parametrize(
    ("told", "code", "words"),
    [(None, 1, "exited by itself with 1"), ("stop", 1, "graceful stop exited 1")],
)
def test_a_daemon_that_dies_unbidden_or_stops_uncleanly_is_reported(
    told: str | None, code: int, words: str
) -> None:
    facts = clean()
    extra = Instance(2, 300, T0 + 20, Path("daemon-2.log"), ended=T0 + 21, exit_code=code, told=told)
    facts.instances.append(extra)
    only(check(facts), f"daemon #2{'' if told is None else chr(39) + 's'}", words)


def test_a_sigterm_death_is_a_violation_once_the_daemon_has_asked_the_fake_but_not_before() -> None:
    facts = clean()
    started = Instance(2, 300, T0 + 20, Path("daemon-2.log"), ended=T0 + 21, exit_code=-15, told="stop")
    facts.instances.append(started)
    facts.served.append(served(20.6, "FALSE", arrived=20.5))
    only(check(facts), "daemon #2's graceful stop exited -15")
    facts.served.pop()
    verdict = check(facts)
    assert not verdict.violations
    assert verdict.counts["stopped_before_its_code_ran"] == 1


def test_the_timeline_shows_everything_within_five_seconds() -> None:
    facts = clean()
    facts.actions.append((T0 + 10.0, "set instance/preempted = TRUE (event #1)"))
    rows = timeline(facts, T0 + 13.0)
    assert any("driver" in r and "set instance/preempted" in r for r in rows)
    assert any("fake" in r and "served instance/preempted = 'TRUE'" in r for r in rows)
    assert any("holder #2 pid 12" in r and "reaped: exit -9" in r for r in rows)
    assert any("daemon #1" in r and "[signal_sent]" in r for r in rows)
    assert not any("daemon_started" in r for r in rows)  # t+0.4: too far
    assert rows == sorted(rows, key=lambda r: float(r.split("t+")[1].split()[0]))


def test_the_daemon_log_parser_reads_json_and_text_lines() -> None:
    json_line = (
        '{"time": "2027-01-15T08:00:01.250000Z", "severity": "WARNING", "message": "SIGTERM to pid 7", '
        '"kind": "signal_sent", "pid": 7, "start_time": 42, "process": "python", "signal": "SIGTERM", '
        '"result": "sent", "drain_id": "d1", "event_ids": ["preempted:TRUE@1"], "late": true}'
    )
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(T0))
    text = [
        f"{stamp} WARNING SIGKILL to pid 8 (python, start time 43): sent",
        f"{stamp} WARNING event started: preempted = TRUE (id preempted:TRUE@1)",
        f"{stamp} ERROR internal error in _handle: the daemon carries on",
        "Traceback (most recent call last):",
        f"{stamp} WARNING SIGTERM to pid 9 (python, start time 44, unit train.service, late arrival): sent",
    ]
    parsed = parse_daemon_log("\n".join([json_line, *text]), instance=3)
    first = parsed[0]
    assert (first.kind, first.get("pid"), first.get("signal"), first.get("late")) == (
        "signal_sent",
        7,
        "SIGTERM",
        True,
    )
    assert first.at == pytest.approx(1800000001.25)
    assert (first.resolution, first.instance, first.get("event_ids")) == (0.0, 3, ["preempted:TRUE@1"])
    kill = parsed[1]
    assert (kill.kind, kill.get("pid"), kill.get("start_time"), kill.at, kill.resolution) == (
        "signal_sent", 8, 43, T0, 1.0
    )  # fmt: skip
    assert (parsed[2].kind, parsed[2].get("event")) == ("event_started", "preempted")
    assert parsed[3].kind is None
    assert (parsed[4].kind, parsed[4].at, parsed[4].message) == (
        None,
        T0,
        "Traceback (most recent call last):",
    )
    named = parsed[5]  # a holder's workload (docs/holder-identity.md) and a late arrival after its start time
    assert (named.kind, named.get("pid"), named.get("start_time")) == ("signal_sent", 9, 44)


def test_the_holder_log_parser_applies_each_line_to_its_holder() -> None:
    one = HolderFacts(1, 41, "release", T0)
    read_holder_lines(
        b"1 41 open 1800000001.5 777\n1 41 term 1800000002.0\n1 41 release 1800000002.1\n9 99 term 1.0\n",
        {1: one},
    )
    assert (one.opened, one.start_time, one.terms, one.released) == (T0 + 1.5, 777, [T0 + 2.0], T0 + 2.1)
    assert one.stopped_holding == T0 + 2.1


def test_kept_facts_are_judged_the_same_when_read_back() -> None:
    facts = clean()
    facts.holders.append(holder(3, 13, "handled", 11.0))
    again = load_facts(facts_json(facts))
    assert again == facts
    assert texts(check(again)) == texts(check(facts))
