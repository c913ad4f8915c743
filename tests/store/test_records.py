"""State records: JSON round trips, and wrong shapes rejected with the field and the reason."""

from __future__ import annotations

import json
import signal
from dataclasses import replace
from typing import Any

import pytest

from watchdog.core.lifecycle import ActiveDrain, Event, Lifecycle, Trigger, drain_id_at
from watchdog.core.process import ProcessIdentity
from watchdog.core.vocabulary import SigtermDisposition
from watchdog.store.records import (
    ExitRecord,
    SavedState,
    SignalRecord,
    StateFormatError,
    plain,
    signal_name,
)

STATE = SavedState(
    "boot",
    (Event("ev", "maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE", 100.0, confirmed=False),),
    ActiveDrain(["ev"], 101.0, 401.0, drain_id="d1"),
    last_outcome=None,
    signals=(
        SignalRecord(
            ProcessIdentity(10, 5), "python3", "SIGTERM", 102.0, 102.5, "sent", SigtermDisposition.DEFAULT
        ),
        SignalRecord(ProcessIdentity(11, 6), "", "SIGKILL", 402.0),
    ),
    exits=(ExitRecord(ProcessIdentity(10, 5), "exited", 103.25, None, 15),),
)


def test_round_trip() -> None:
    assert SavedState.from_json(STATE.to_json(written_at=500.0)) == STATE
    assert SavedState.from_json(SavedState("b").to_json(1.0)) == SavedState("b")
    leave = replace(STATE, on_timeout="leave")
    assert SavedState.from_json(leave.to_json(written_at=500.0)) == leave
    rehearsed = replace(STATE, last_outcome="timed_out", last_dry_run=True)
    assert SavedState.from_json(rehearsed.to_json(written_at=500.0)) == rehearsed
    ended = replace(STATE, drain=None, last_outcome="exited", ended_drain=STATE.drain, ended_at=150.0)
    assert SavedState.from_json(ended.to_json(written_at=500.0)) == ended  # a late arrival joins it


def test_the_file_keeps_its_field_names() -> None:
    """The lifecycle's own Event and ActiveDrain, in the JSON the file has always had (phase and grace
    derived, confirmed and cancelling not kept)."""
    data = STATE.to_json(written_at=500.0)
    assert data["events"] == [
        {"source": "maintenance-event", "value": "TERMINATE_ON_HOST_MAINTENANCE", "id": "ev",
         "first_seen": 100.0, "drained": False, "deadline": None},
    ]  # fmt: skip
    assert data["drain"] == {
        "event_ids": ["ev"], "phase": "draining", "started_at": 101.0, "deadline_at": 401.0, "grace": 300.0,
        "on_timeout": "kill", "late": False, "id": "d1",
    }  # fmt: skip


def test_the_lifecycle_through_the_file_is_the_same_lifecycle_its_events_unconfirmed() -> None:
    life = Lifecycle()
    life.observe(
        "maintenance-event", Trigger("maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE", 300.0), 1000.0
    )
    life.drain_finished("exited", 1001.0)
    life.late_arrivals(1005.0)
    saved = SavedState("boot", tuple(life.events.values()), life.drain, life.last_outcome)
    again = SavedState.from_json(json.loads(json.dumps(saved.to_json(written_at=1006.0))))
    restored = Lifecycle.restored(again.events, again.drain, again.last_outcome)
    event = restored.events["maintenance-event"]
    assert (event.event_id, event.deadline, event.drained) == (
        life.events["maintenance-event"].event_id, 1300.0, True,
    )  # fmt: skip
    assert not event.confirmed  # until this run hears the metadata server say it again
    assert restored.drain == life.drain  # the reopened drain, its id and deadline
    life.drain_finished("exited", 1007.0)
    saved = SavedState("boot", tuple(life.events.values()), None, life.last_outcome,
                       ended_drain=life.ended, ended_at=life.ended_at)  # fmt: skip
    again = SavedState.from_json(json.loads(json.dumps(saved.to_json(written_at=1008.0))))
    restored = Lifecycle.restored(again.events, None, again.last_outcome, ended=again.ended_drain,
                                  ended_at=again.ended_at)  # fmt: skip
    assert restored.ended is not None
    assert life.ended is not None
    assert (restored.ended.drain_id, restored.ended_at) == (life.ended.drain_id, 1001.0)


def test_an_old_file_loads() -> None:
    """Written before events had deadlines and drains had ids or late arrivals: they load, unconfirmed,
    the drain's id derived from its start, whatever phase it was in."""
    data = STATE.to_json(written_at=500.0)
    del data["events"][0]["deadline"]  # type: ignore[index]
    for name in ("id", "late"):
        del data["drain"][name]  # type: ignore[index]
    data["drain"]["phase"] = "terminating"  # type: ignore[index]
    del data["last_dry_run"]  # before rehearsals were told apart: a real drain
    del data["signals"][0]["sigterm"]  # type: ignore[index]  # before dispositions were written ahead
    del data["exits"]  # before the processes' ends were kept: unseen, as then
    state = SavedState.from_json(data)
    (event,) = state.events
    assert (event.deadline, event.confirmed) == (None, False)
    assert state.drain == ActiveDrain(["ev"], 101.0, 401.0, drain_id=drain_id_at(101.0))
    assert state.last_dry_run is False
    assert state.signals[0].sigterm is None
    assert state.exits == ()


def test_a_disposition_this_version_does_not_know_is_taken_as_unknown() -> None:
    data = good()
    data["signals"][0]["sigterm"] = "blocked"  # a newer version's word: not a reason to set the file aside
    assert SavedState.from_json(data).signals[0].sigterm is None


def good() -> dict[str, Any]:
    return STATE.to_json(written_at=1.0)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda d: d.pop("boot_id"), "boot_id: missing"),
        (lambda d: d.update(format="x"), "not our file"),
        (lambda d: d.update(version="1"), "version: expected 1"),
        (lambda d: d.update(events={}), "events: expected a list"),
        (lambda d: d["events"][0].update(first_seen="yesterday"), "events[0].first_seen: expected a number"),
        (lambda d: d["events"][0].update(id=""), "events[0].id: expected a non-empty string"),
        (lambda d: d["events"][0].update(drained="yes"), "events[0].drained: expected true or false"),
        (lambda d: d["drain"].update(event_ids=[1]), "drain.event_ids: expected a list of event ids"),
        (lambda d: d.update(last_outcome=7), "last_outcome: expected a string or null"),
        (lambda d: d.update(last_dry_run="no"), "last_dry_run: expected true or false"),
        (lambda d: d["drain"].update(on_timeout="wait"), "drain.on_timeout: expected kill or leave"),
        (lambda d: d["drain"].update(grace=float("nan")), "drain.grace: expected a number"),
        (lambda d: d.update(signals={}), "signals: expected a list"),
        (lambda d: d["signals"][1].update(pid=0), "signals[1].pid: expected an integer >= 1"),
        (lambda d: d["signals"][0].update(start_time=True), "signals[0].start_time: expected an integer"),
        (lambda d: d["signals"][0].update(signal="TERM"), "signals[0].signal: expected a signal name"),
        (lambda d: d["signals"][0].update(result=3), "signals[0].result: expected a string or null"),
        (lambda d: d["signals"][0].pop("sent_at"), "signals[0].sent_at: missing"),
        (lambda d: d["signals"][0].update(sigterm=15), "signals[0].sigterm: expected a string or null"),
        (lambda d: d.update(exits={}), "exits: expected a list"),
        (lambda d: d["exits"][0].update(end="killed"), "exits[0].end: expected one of exited, released"),
        (lambda d: d["exits"][0].update(at=None), "exits[0].at: expected a number"),
        (lambda d: d["exits"][0].update(code=-1), "exits[0].code: expected an integer >= 0"),
        (lambda d: d["exits"][0].update(signal=0), "exits[0].signal: expected an integer >= 1"),
    ],
)
def test_wrong_shapes_are_rejected_with_the_field_and_reason(change: Any, reason: str) -> None:
    data = good()
    change(data)
    with pytest.raises(StateFormatError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        SavedState.from_json(data)


def test_find_and_replace_signals() -> None:
    assert STATE.find(ProcessIdentity(10, 5), signal.SIGTERM) is STATE.signals[0]
    assert STATE.find(ProcessIdentity(10, 999), signal.SIGTERM) is None  # same PID, another process
    assert STATE.unconfirmed() == (STATE.signals[1],)
    sent = SignalRecord(ProcessIdentity(11, 6), "", "SIGKILL", 402.0, 403.0, "gone")
    assert STATE.with_signal(sent).signals == (STATE.signals[0], sent)


def test_a_process_s_end_replaces_the_one_on_file_for_it() -> None:
    again = ExitRecord(ProcessIdentity(10, 5), "exited", 104.0, 0, None)
    other = ExitRecord(ProcessIdentity(11, 6), "released", 105.0)
    assert STATE.with_exits([again, other]).exits == (again, other)


def test_signal_names_and_enum_values() -> None:
    assert signal_name(15) == signal_name(signal.SIGTERM) == signal_name("SIGTERM") == "SIGTERM"
    with pytest.raises(ValueError, match="not a signal name"):
        signal_name("SIGNOPE")
    assert plain(signal.Signals.SIGKILL) == 9
    assert plain("sent") == "sent"
