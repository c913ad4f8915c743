"""State records: JSON round trips, and wrong shapes rejected with the field and the reason."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from watchdog.core.process import ProcessIdentity
from watchdog.store.records import (
    DrainState,
    EventRecord,
    SignalRecord,
    State,
    StateFormatError,
    plain,
    signal_name,
)

STATE = State(
    "boot",
    (EventRecord("maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE", "ev", 100.0),),
    DrainState("terminating", 101.0, 401.0, 300.0, "kill", ("ev",)),
    last_outcome=None,
    signals=(
        SignalRecord(ProcessIdentity(10, 5), "python3", "SIGTERM", 102.0, 102.5, "sent"),
        SignalRecord(ProcessIdentity(11, 6), "", "SIGKILL", 402.0),
    ),
)


def test_round_trip() -> None:
    assert State.from_json(STATE.to_json(written_at=500.0)) == STATE
    assert State.from_json(State("b").to_json(1.0)) == State("b")


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
        (lambda d: d["drain"].update(on_timeout="wait"), "drain.on_timeout: expected kill or leave"),
        (lambda d: d["drain"].update(grace=float("nan")), "drain.grace: expected a number"),
        (lambda d: d.update(signals={}), "signals: expected a list"),
        (lambda d: d["signals"][1].update(pid=0), "signals[1].pid: expected an integer >= 1"),
        (lambda d: d["signals"][0].update(start_time=True), "signals[0].start_time: expected an integer"),
        (lambda d: d["signals"][0].update(signal="TERM"), "signals[0].signal: expected a signal name"),
        (lambda d: d["signals"][0].update(result=3), "signals[0].result: expected a string or null"),
        (lambda d: d["signals"][0].pop("sent_at"), "signals[0].sent_at: missing"),
    ],
)
def test_wrong_shapes_are_rejected_with_the_field_and_reason(change: Any, reason: str) -> None:
    data = good()
    change(data)
    with pytest.raises(StateFormatError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        State.from_json(data)


def test_find_and_replace_signals() -> None:
    assert STATE.find(ProcessIdentity(10, 5), signal.SIGTERM) is STATE.signals[0]
    assert STATE.find(ProcessIdentity(10, 999), signal.SIGTERM) is None  # same PID, another process
    assert STATE.unconfirmed() == (STATE.signals[1],)
    sent = SignalRecord(ProcessIdentity(11, 6), "", "SIGKILL", 402.0, 403.0, "gone")
    assert STATE.with_signal(sent).signals == (STATE.signals[0], sent)


def test_signal_names_and_enum_values() -> None:
    assert signal_name(15) == signal_name(signal.SIGTERM) == signal_name("SIGTERM") == "SIGTERM"
    with pytest.raises(ValueError, match="not a signal name"):
        signal_name("SIGNOPE")
    assert plain(signal.Signals.SIGKILL) == 9
    assert plain("sent") == "sent"
