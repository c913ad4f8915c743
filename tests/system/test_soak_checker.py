"""The soak's checker (bench/soak_checker.py) on synthetic facts: a clean run passes, and each broken
promise (an extra SIGTERM, a missed late arrival, a late SIGKILL, a signal after a clear while down, ...) is
reported once, with the timeline around it. Also the parsers of the daemon's log and of the holders' log."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench.soak_checker import Verdict, check
from bench.soak_facts import (
    Episode,
    Facts,
    HolderFacts,
    Instance,
    LogLine,
    facts_json,
    load_facts,
    parse_daemon_log,
    read_holder_lines,
    timeline,
)

T0 = 1_800_000_000.0


def line(at: float, kind: str, instance: int = 1, **fields: object) -> LogLine:
    return LogLine(T0 + at, kind, f"{kind} {fields}", fields, instance)


def sent(at: float, pid: int, signame: str, instance: int = 1) -> LogLine:
    return line(at, "signal_sent", instance, pid=pid, start_time=500 + pid, signal=signame, result="sent")


def holder(serial: int, pid: int, mode: str, opened: float, **facts: object) -> HolderFacts:
    made = HolderFacts(serial, pid, mode, T0 + opened - 0.2, opened=T0 + opened, start_time=500 + pid)
    for name, value in facts.items():
        setattr(made, name, value)
    return made


def clean() -> Facts:
    """A preemption at t+10 (deadline t+13, cleared t+16), drained by daemon #1 (up all along): holder #1
    (handled) exits on its SIGTERM, holder #2 (report) carries on and is SIGKILLed at the deadline."""
    facts = Facts(t0=T0, end=T0 + 30)
    facts.episodes.append(Episode(1, "preempted", T0 + 10, T0 + 16, deadlines=[(T0 + 10.1, T0 + 13)]))
    facts.episodes[0].drained_at_clear = True
    daemon = Instance(
        1, 100, T0, Path("daemon-1.log"), ready=T0 + 0.5, ended=T0 + 30, exit_code=0, told="final"
    )
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
    first.ended, first.exit_code, first.told = T0 + at, -9, "kill"
    first.lines = [x for x in first.lines if x.at < T0 + at]


def texts(verdict: Verdict) -> list[str]:
    return [v.text for v in verdict.violations]


def only(verdict: Verdict, *words: str) -> str:
    """The one violation, which must name every word."""
    assert len(verdict.violations) == 1, texts(verdict)
    text = verdict.violations[0].text
    assert all(word in text for word in words), text
    return text


def test_a_clean_run_has_no_violation_and_times_its_sigkill() -> None:
    verdict = check(clean())
    assert texts(verdict) == []
    assert verdict.kill_offsets == [0.0]
    assert (verdict.counts["sigterms"], verdict.counts["sigkills"]) == (2, 1)


def test_a_second_sigterm_in_one_event_is_reported() -> None:
    facts = clean()
    facts.holders[1].terms.append(T0 + 11.0)
    facts.instances[0].lines.append(sent(10.99, 12, "SIGTERM"))
    only(check(facts), "second SIGTERM to pid 12", "first at t+10.08")


def test_a_sigterm_outside_any_event_is_reported() -> None:
    facts = clean()
    facts.holders.append(holder(3, 13, "report", 20.0, terms=[T0 + 25.0]))
    facts.instances[0].lines.append(sent(24.99, 13, "SIGTERM"))
    only(check(facts), "SIGTERM to pid 13", "outside any event")


def test_a_sigterm_long_after_a_clear_the_daemon_had_not_heard_of_is_no_violation() -> None:
    """Faults hid the clear from the daemon until t+26: a SIGTERM at t+25 is late news, not a daemon bug."""
    facts = clean()
    facts.instances[0].lines[-1] = line(26.0, "event_cleared", event="preempted")
    facts.holders.append(holder(3, 13, "report", 20.0, terms=[T0 + 25.0]))
    facts.instances[0].lines.append(sent(24.99, 13, "SIGTERM"))
    assert texts(check(facts)) == []


def test_a_sigterm_no_daemon_logged_is_a_signal_from_elsewhere() -> None:
    facts = clean()
    facts.holders.append(holder(3, 13, "report", 11.0, terms=[T0 + 11.5]))
    only(check(facts), "pid 13", "no daemon's log names")


def test_a_late_arrival_that_never_gets_its_sigterm_is_reported() -> None:
    """The drain's holders were signalled at t+10.08; a restarted job opens the device at t+11 and holds
    it until the clear, with the event on and the daemon knowing it: it was owed a SIGTERM."""
    facts = clean()
    facts.holders.append(holder(3, 13, "handled", 11.0))
    text = only(check(facts), "pid 13", "got no SIGTERM", "a late arrival", "daemon #1 knew it")
    assert "held the device for 5.0 s" in text


def test_a_late_arrival_after_a_drain_that_found_no_holder_is_owed_its_sigterm() -> None:
    facts = clean()
    facts.holders = []
    facts.instances[0].lines = [x for x in facts.instances[0].lines if x.kind != "signal_sent"]
    facts.holders.append(holder(1, 13, "handled", 11.0))
    only(check(facts), "pid 13", "got no SIGTERM", "it opened 0.9 s after the drain began")


def test_a_late_arrival_is_owed_nothing_while_no_daemon_knows_of_the_event() -> None:
    facts = clean()
    facts.instances[0].lines = [x for x in facts.instances[0].lines if x.kind != "event_started"]
    facts.instances[0].lines.insert(1, line(14.0, "event_cleared", event="preempted"))
    facts.holders.append(holder(3, 13, "handled", 14.5))
    assert not [t for t in texts(check(facts)) if "pid 13" in t]


def test_a_late_sigkill_is_reported_with_both_clocks() -> None:
    facts = clean()
    facts.holders[1].died = T0 + 14.5
    facts.instances[0].lines[5] = sent(14.49, 12, "SIGKILL")
    only(
        check(facts),
        "SIGKILL of pid 12",
        "at +1.49 s from its due",
        "reaped at +1.50 s",
        "logged it at +1.49 s",
    )


def test_a_late_reaper_is_not_a_late_daemon() -> None:
    """The daemon logged its SIGKILL on time; the reaper saw the death 1.5 s later: the driver's timing."""
    facts = clean()
    facts.holders[1].died = T0 + 14.5
    verdict = check(facts)
    assert texts(verdict) == []
    assert verdict.kill_offsets == [0.0]


def test_a_holder_never_sigkilled_at_its_deadline_is_reported() -> None:
    facts = clean()
    facts.holders[1].died, facts.holders[1].exit_code = None, None
    del facts.instances[0].lines[5]
    only(check(facts), "pid 12", "was not SIGKILLed")


def test_no_daemon_at_the_deadline_moves_the_sigkill_to_when_one_knows() -> None:
    """Daemon #1 is killed at t+12; #2 resumes the drain at t+15: the SIGKILL is due then, not at t+13."""
    facts = clean()
    killed(facts, 12)
    second = Instance(2, 200, T0 + 14, Path("daemon-2.log"), ended=T0 + 30, exit_code=0, told="final")
    second.lines = [line(15.0, "state_recovered", 2), sent(15.1, 12, "SIGKILL", 2)]
    second.lines.append(line(16.05, "event_cleared", 2, event="preempted"))
    facts.instances.append(second)
    facts.holders[1].died = T0 + 15.1
    verdict = check(facts)
    assert texts(verdict) == []
    assert verdict.kill_offsets == [0.1]


def test_signals_after_a_clear_while_down_are_reported() -> None:
    """Daemon #1 is killed mid-drain, the event cleared while it is down, a new job opens the device, and
    daemon #2 resumes the drain from the state file without a fresh answer: it signals the new job."""
    facts = clean()
    killed(facts, 12)
    episode = facts.episodes[0]
    episode.cleared, episode.cleared_while_down, episode.drained_at_clear = T0 + 12.1, True, None
    second = Instance(2, 200, T0 + 12.3, Path("daemon-2.log"), ended=T0 + 30, exit_code=0, told="final")
    second.lines = [
        line(12.4, "state_recovered", 2),
        sent(12.5, 13, "SIGTERM", 2),
        sent(13.0, 12, "SIGKILL", 2),
    ]
    facts.instances.append(second)
    facts.holders.append(holder(3, 13, "report", 12.2, after_clear=True, terms=[T0 + 12.51]))
    verdict = check(facts)
    # The new job's SIGTERM is a breach; the SIGKILL of pid 12, SIGTERMed by daemon #1 before the crash, is
    # not: a process already signalled keeps its deadline and its SIGKILL across a restart.
    assert len(verdict.violations) == 1, texts(verdict)
    assert "SIGTERM to pid 13" in texts(verdict)[0]
    assert "cleared while no daemon ran, by daemon #2" in texts(verdict)[0]
    assert verdict.counts["kept_kills_after_restart"] == 1
    assert verdict.counts["jobs_after_clear_signalled"] == 1


def test_a_crash_that_left_an_unconfirmed_intent_excuses_a_missing_sigterm() -> None:
    facts = clean()
    facts.holders.append(holder(3, 13, "handled", 11.0))
    facts.intents[(13, 513)] = False  # written ahead, never confirmed: a crash may have come in between
    verdict = check(facts)
    assert texts(verdict) == []
    assert verdict.counts["possibly_sent"] == 1


def test_a_deadline_that_moves_later_and_an_event_left_undrained_are_reported() -> None:
    facts = clean()
    facts.episodes[0].deadlines.append((T0 + 11, T0 + 13.5))
    assert "moved later: " in only(check(facts), "the deadline of the preempted event #1")
    facts = clean()
    facts.episodes[0].drained_at_clear = False
    only(check(facts), "outlived its deadline undrained")


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


def test_a_sigterm_death_is_a_violation_once_the_daemon_has_run_but_not_before() -> None:
    facts = clean()
    started = Instance(2, 300, T0 + 20, Path("daemon-2.log"), ended=T0 + 21, exit_code=-15, told="stop")
    started.lines.append(LogLine(T0 + 20.5, "daemon_started", "tpu-watchdog started", {}, 2))
    facts.instances.append(started)
    only(check(facts), "daemon #2's graceful stop exited -15")
    facts = clean()
    starting = Instance(2, 300, T0 + 20, Path("daemon-2.log"), ended=T0 + 20.1, exit_code=-15, told="stop")
    facts.instances.append(starting)
    verdict = check(facts)
    assert not verdict.violations
    assert verdict.counts["stopped_before_its_code_ran"] == 1


def test_the_timeline_shows_everything_within_five_seconds() -> None:
    facts = clean()
    facts.actions.append((T0 + 10.0, "set instance/preempted = TRUE (event #1)"))
    rows = timeline(facts, T0 + 13.0)
    assert any("driver" in r and "set instance/preempted" in r for r in rows)
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
    facts.intents[(12, 512)] = True
    again = load_facts(facts_json(facts))
    assert again == facts
    assert texts(check(again)) == texts(check(facts))


def resuming_daemon(started: float, up: float, kills: float, clears: float) -> Instance:
    """Daemon #2 (pid 200), started at t+`started`: it recovers the state file and resumes the drain at
    t+`up`, SIGKILLs holder #2 (pid 12) at t+`kills` and hears the preemption clear at t+`clears`."""
    second = Instance(2, 200, T0 + started, Path("daemon-2.log"), ended=T0 + 30, exit_code=0, told="final")
    second.lines = [
        line(up, "state_recovered", 2),
        line(up + 0.01, "drain_started", 2, event="resumed"),
        sent(kills, 12, "SIGKILL", 2),
        line(clears, "event_cleared", 2, event="preempted"),
    ]
    return second


def restarted_at_the_deadline(told: str | None) -> Facts:
    """Daemon #1 logs its last line at t+12.9, 0.1 s before the deadline, and is reaped at t+13.4 (told to
    stop at t+12.8, or not told at all); daemon #2 is up at t+17 (a slow start), resumes the drain and
    SIGKILLs holder #2 at once, 4 s after the deadline."""
    facts = clean()
    first = facts.instances[0]
    first.ended, first.told, first.exit_code = T0 + 13.4, told, 0
    first.lines = [x for x in first.lines if x.at < T0 + 12.9]
    if told:
        facts.actions.append((T0 + 12.8, f"SIGTERM to daemon #{first.index}"))
    facts.instances.append(resuming_daemon(started=13.5, up=17.0, kills=17.02, clears=17.5))
    facts.episodes[0].cleared = T0 + 17.8
    facts.holders[1].died = T0 + 17.03
    return facts


def test_a_sigkill_due_while_a_told_daemon_stops_is_due_when_the_next_one_is_up() -> None:
    """A graceful stop interrupts the drain for the next start: the SIGKILL comes from that start."""
    verdict = check(restarted_at_the_deadline("stop"))
    assert texts(verdict) == []
    assert verdict.kill_offsets == [pytest.approx(0.02, abs=0.01)]


def test_a_sigkill_a_daemon_running_at_the_deadline_did_not_send_is_late() -> None:
    """Not told to stop, daemon #1 was up at the deadline: the SIGKILL was its to send, 4 s earlier."""
    verdict = check(restarted_at_the_deadline(None))
    late = "SIGKILL of pid 12 (holder #2, report) at +4.02 s from its due time"
    assert any(late in text for text in texts(verdict))


def test_a_daemon_told_to_stop_just_before_its_deadline_may_still_kill_at_it() -> None:
    """Told at t+12.8, daemon #1 reached its deadline (t+13) before it handled the stop and SIGKILLed holder
    #2 then: on time (a 60 s soak of make test was reported "early" against the next start's due time)."""
    facts = restarted_at_the_deadline("stop")
    first, second = facts.instances
    first.lines.append(sent(13.05, 12, "SIGKILL", 1))
    second.lines = [x for x in second.lines if x.fields.get("signal") != "SIGKILL"]
    facts.holders[1].died = T0 + 13.06
    verdict = check(facts)
    assert texts(verdict) == []
    assert verdict.kill_offsets == [pytest.approx(0.05, abs=0.01)]


def test_a_newcomer_held_back_by_a_restarted_daemon_no_answer_confirmed_is_owed_no_sigkill() -> None:
    """Daemon #1 is killed at t+10.2 mid-drain; #2 resumes it at t+10.35, and every metadata answer is a
    fault (nothing confirms the event within its 10 s wait); holder #3 opens the device at t+10.4, still
    there at the t+13 deadline: past its deadline an unheard event signals nobody new (soak seed 97 flagged
    it "was not SIGKILLed"). Holder #2, SIGTERMed before the crash, is still SIGKILLed on time."""
    facts = clean()
    killed(facts, 10.2)
    facts.actions.append((T0 + 10.2, "kill -9 to daemon #1"))
    facts.instances.append(resuming_daemon(started=10.3, up=10.35, kills=13.0, clears=16.05))
    facts.holders.append(holder(3, 13, "report", 10.4))
    verdict = check(facts)
    assert texts(verdict) == []
    assert verdict.kill_offsets == [0.0]
