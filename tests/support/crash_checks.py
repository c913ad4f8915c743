"""The crash scenario's invariants (pure): plan + facts (tests/support/crash_scenario.py) -> violations."""

from __future__ import annotations

import signal
from typing import Any

from watchdog.daemon.runner import RESCAN_INTERVAL
from watchdog.store.history import HISTORY_FILE, LOCK_FILE

SLACK = 1.0  # the product's rule: SIGKILL within +-1 s of the deadline


def deadlines(states: list[dict[str, Any]]) -> list[float]:
    """Every drain deadline seen in the state file, in order; a state with no drain (a drain that ended
    between two reads of the file) gives its events' deadline instead."""
    found: list[float] = []
    for state in states:
        if state["drain"]:
            found.append(state["drain"]["deadline_at"])
        else:
            found += [e["deadline"] for e in state["events"] if e["deadline"] is not None]
    return found


def latest_deadline(states: list[dict[str, Any]]) -> float | None:
    seen = deadlines(states)
    return seen[-1] if seen else None


def original_deadline(facts: dict[str, Any]) -> float | None:
    """The first deadline any daemon wrote to the state file."""
    seen = deadlines(facts.get("states", []))
    return seen[0] if seen else None


def kill_due(facts: dict[str, Any], deadline: float) -> float:
    """When the SIGKILL of a holder that ignores SIGTERM is due: the deadline, or, if no daemon was up then,
    the moment the first one was back (a run counts if it lived at least SLACK s past that moment)."""
    due = float("inf")
    for run in facts.get("runs", []):
        if run.get("started") is None:
            continue
        moment = max(deadline, run["started"])
        if run.get("killed") is None or run["killed"] > moment + SLACK:
            due = min(due, moment)
    return due


def term_owed(facts: dict[str, Any], deadline: float) -> bool:
    """True if some daemon run was up, with the event on, for SLACK s before the deadline: it owed every
    holder a SIGTERM. (A drain first resumed after its deadline goes straight to SIGKILL, by design.)"""
    event_set = facts.get("event_set") or 0.0
    for run in facts.get("runs", []):
        if run.get("started") is None:
            continue
        end = min(deadline, run["killed"] if run.get("killed") is not None else deadline)
        if end - max(run["started"], event_set) >= SLACK:
            return True
    return False


def settled(state: dict[str, Any] | None, holders_gone: bool) -> bool:
    """Whether the driver may clear the event: every holder gone and, in the state file read after that, no
    drain in progress and an outcome. Holders gone alone is not enough: the drain that killed the last one
    (the drain reopened for a holder whose SIGTERM a crash left unconfirmed) may not have ended yet, and
    a clear then lands in that drain (see `_check_cleared`)."""
    return holders_gone and state is not None and state["drain"] is None and state["last_outcome"] is not None


def is_crash_temp_file(name: str) -> bool:
    """A file a daemon killed mid-write leaves in the state dir: the temp file of a state write that was
    never renamed (`.state.json.XXXX.tmp`), or the write probe of its start-up (`.probe-XXXX`)."""
    temp = name.startswith((".state.json.", f".{HISTORY_FILE}.")) and name.endswith(".tmp")
    return temp or name.startswith(".probe-")


def check(facts: dict[str, Any]) -> list[str]:
    """Every invariant the scenario's facts break, each a sentence naming the holder, times and values."""
    out: list[str] = [f"the driver failed: {e}" for e in facts.get("errors", [])]
    if not facts.get("holders"):
        return [*out, "no facts were recorded"]
    states: list[dict[str, Any]] = facts.get("states", [])
    deadline = original_deadline(facts)
    if deadline is None:
        out.append("no daemon ever wrote a drain or an event to the state file")
    else:
        later = [d for d in deadlines(states) if d > deadline]
        if later:
            out.append(f"the deadline moved later: {deadline:.3f} -> {later}")
    first_event_deadline: dict[str, float] = {}
    for state in states:
        for event in state["events"]:
            if event["deadline"] is None:
                continue
            first = first_event_deadline.setdefault(event["id"], event["deadline"])
            if event["deadline"] > first:
                out.append(
                    f"event {event['id']}: deadline moved later {first:.3f} -> {event['deadline']:.3f}"
                )
    # A late arrival (a holder no run had signalled: after a restart, once the event is confirmed) joins the
    # event's drain, reopened with its start: never a second drain of the event.
    starts = sorted({s["drain"]["started_at"] for s in states if s["drain"]})
    if len(starts) > 1:
        out.append(f"the event was drained more than once: drains started at {starts}")
    excused = {pid for crash in facts.get("crashes", []) for pid in crash.get("unconfirmed_term", [])}
    if deadline is not None and not term_owed(facts, deadline):
        excused |= {h["pid"] for h in facts["holders"]}  # no daemon was up long enough before the deadline
    due = kill_due(facts, deadline) if deadline is not None else float("inf")
    for holder in facts["holders"]:
        out += _check_holder(holder, deadline, due, excused)
    final = facts.get("finished")
    if final is None:
        out.append("no drain finished after the last restart (drain lost)")
    elif final["outcome"] not in ("exited", "timed_out", "no_holders"):
        out.append(f"the drain finished {final['outcome']!r}, not exited/timed_out/no_holders")
    out += _check_cleared(facts)
    out += _check_history(facts)
    ours = ("state.json", HISTORY_FILE, LOCK_FILE)  # the history's lock stays: its writers meet there
    stray = [name for name in facts.get("state_dir", []) if name not in ours]
    temps = [name for name in stray if is_crash_temp_file(name)]
    if temps:
        out.append(f"temp files of a write a crash interrupted were left in the state dir: {temps}")
    if set(stray) - set(temps):
        out.append(
            f"the state dir holds more than state.json after the event: {sorted(set(stray) - set(temps))}"
        )
    for run in facts.get("runs", []):
        if run.get("errors"):
            out.append(f"daemon run {run['index']} logged errors: {run['errors'][:3]}")
    if facts.get("stop_status") != 0:
        out.append(f"the last daemon did not stop cleanly: exit {facts.get('stop_status')}")
    return out


def _check_cleared(facts: dict[str, Any]) -> list[str]:
    """No orphaned state: the first state file with no events and no drain after the clear has no outcome
    and no signals either. Strict, and rightly so for this scenario only because the driver clears once
    every drain has ended (`settled`): the clear then empties the file (`Lifecycle._clear`). A clear that
    lands while a drain still runs cancels it, and the outcome that drain ends with is kept with no event on
    (`Lifecycle.drain_finished`, as `restored` keeps "cancelled" for a drain on file whose events are gone):
    the daemon's state is idle, and `status` says how that last drain ended. That is no orphan; a driver
    that cleared on "every holder gone" alone met it whenever the clear reached the loop before the end of
    the reopened drain that killed a late arrival, the last holder (a drain's end waits for its state-file
    writes, daemon/writeahead.py, so under load the clear often won)."""
    cleared = facts.get("cleared")
    if cleared is None:
        return ["the state never went back to empty after the event cleared"]
    leftover = {k: cleared[k] for k in ("events", "drain", "last_outcome", "signals") if cleared[k]}
    return [f"orphaned state after the event cleared: {leftover}"] if leftover else []


def _check_history(facts: dict[str, Any]) -> list[str]:
    """The drain is in the history, finished, once, with every holder that got a SIGTERM (a late arrival
    is in the one entry: it joined the drain, reopened)."""
    history: list[dict[str, Any]] = facts.get("history", [])
    if len(history) != 1:
        ids = [e["id"] for e in history]
        return [f"the history holds {len(history)} drain(s) of the event, not 1: {ids}"]
    out = [f"drain {e['id']} is in the history with no outcome" for e in history if e.get("outcome") is None]
    listed = {p["pid"] for e in history for p in e.get("processes", []) if "SIGTERM" in p.get("signals", [])}
    missing = [h["pid"] for h in facts["holders"] if h.get("terms") and h["pid"] not in listed]
    if missing:
        out.append(f"holders that got SIGTERM are missing from the history: {missing}")
    return out


def _newcomer_wait(terms: list[float], due: float) -> float:
    """A holder whose SIGTERM a crash kept from going out is, to the restarted daemon, one nobody signalled:
    it is signalled (and, past the deadline, killed) at the late-arrival scan after the event is confirmed,
    up to RESCAN_INTERVAL after the daemon is up."""
    return RESCAN_INTERVAL if terms and min(terms) >= due - SLACK else 0.0


def _check_holder(holder: dict[str, Any], deadline: float | None, due: float, excused: set[int]) -> list[str]:
    out: list[str] = []
    name = f"holder {holder['pid']} ({holder['mode']})"
    terms: list[float] = holder["terms"]
    died, code = holder["died"], holder["returncode"]
    if len(terms) > 1:
        out.append(f"{name} got {len(terms)} SIGTERMs for one event (at {terms})")
    if not terms and holder["pid"] not in excused:
        out.append(f"{name} never got a SIGTERM, and no crash left an unconfirmed intent for it")
    killed = code == -signal.SIGKILL and not holder["killed_by_driver"]
    if holder["mode"] == "ignore" and deadline is not None:
        if not killed or died is None:
            out.append(f"{name} was not SIGKILLed by the daemon (exit {code})")
        elif not deadline - SLACK <= died <= due + SLACK + _newcomer_wait(terms, due):
            out.append(
                f"{name} SIGKILLed at {died:.3f}: {died - deadline:+.3f} s from the deadline {deadline:.3f}"
                + (f" (no daemon up until {due:.3f})" if due > deadline else "")
            )
    elif killed and deadline is not None and died is not None and died < deadline - SLACK:
        out.append(f"{name} SIGKILLed {deadline - died:.3f} s before the deadline")
    if holder["mode"] == "handled" and terms and code != 0:
        out.append(f"{name} got SIGTERM but ended with {code}, not its own exit 0")
    if holder["mode"] == "slow" and terms and deadline is not None:
        exits_at = terms[0] + holder["delay"]
        if exits_at < deadline - SLACK and code != 0:
            out.append(
                f"{name} would have exited at {exits_at:.3f}, before the deadline, but ended with {code}"
            )
    if holder["mode"] == "release" and holder["released"] is not None and not holder["alive_at_end"]:
        out.append(f"{name} released the device but was not left alone (exit {code})")
    gone = holder["released"] if holder["released"] is not None else died
    if gone is None:
        out.append(f"{name} still held the device after the drain (drain lost)")
    elif holder["mode"] != "ignore" and deadline is not None and gone > due + SLACK:  # ignore: checked above
        out.append(f"{name} still held the device {gone - due:.3f} s after the SIGKILL was due")
    return out
