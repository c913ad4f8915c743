"""store/drain_entry.py: one drain as the history keeps it, from its record, its start or the state file."""

from __future__ import annotations

import os
import signal

from watchdog.core.clock import parse_utc_text
from watchdog.core.drain_record import DrainRecord, End, ExitStatus, ProcessRecord, SentSignal, SignalResult
from watchdog.core.process import ProcessIdentity
from watchdog.core.vocabulary import Outcome
from watchdog.core.workload import Workload
from watchdog.store.drain_entry import (
    NO_HANDLER,
    entry_from_record,
    entry_from_saved,
    open_entry,
    rejoined,
    user_name,
)
from watchdog.store.records import SignalRecord

START = 1_800_000_000.25  # wall seconds of the drain's start
EVENT = {"event_key": "instance/maintenance-event", "event_value": "TERMINATE_ON_HOST_MAINTENANCE",
         "event_ids": ("ev-1",)}  # fmt: skip
DRAIN_ID = "20270115T080000.250Z"
OPENED = DrainRecord.opened(DRAIN_ID, START, START + 300, "kill", False, **EVENT)  # type: ignore[arg-type]
HOST = {"instance": "vm-1"}
A, B, C = ProcessIdentity(101, 11), ProcessIdentity(102, 12), ProcessIdentity(103, 13)


def record(dry_run: bool = False) -> DrainRecord:
    """A drain that started at monotonic 50.0 (wall START): A exited 0, B was killed, C had no handler."""
    rec = DrainRecord(50.0, START, 350.0, "kill", dry_run, drain_id=DRAIN_ID, **EVENT)  # type: ignore[arg-type]
    term = SignalResult.SENT
    rec.processes[A] = ProcessRecord(A, "trainer", ("/dev/accel0",), 50.0, uid=0)
    rec.processes[A].signals.append(SentSignal(signal.SIGTERM, 50.01, term))
    rec.processes[A].end, rec.processes[A].ended_at = End.EXITED, 52.5
    rec.processes[A].exit_status = ExitStatus(code=0)
    rec.processes[B] = ProcessRecord(B, "stubborn", ("/dev/accel1",), 50.0, uid=os.getuid())
    rec.processes[B].signals += [
        SentSignal(signal.SIGTERM, 50.01, term),
        SentSignal(signal.SIGKILL, 350.0, term),
    ]
    rec.processes[C] = ProcessRecord(C, "nohandler", ("/dev/accel2",), 50.0)
    rec.processes[C].signals.append(SentSignal(signal.SIGTERM, 50.01, term))
    rec.processes[C].end, rec.processes[C].ended_at = End.EXITED, 50.02
    rec.processes[C].exit_status = ExitStatus(signal=signal.SIGTERM)
    if not dry_run:
        rec.processes[B].end, rec.processes[B].ended_at = End.EXITED, 350.1
    rec.outcome, rec.ended = Outcome.TIMED_OUT, 350.2
    return rec


def by_pid(entry: dict[str, object]) -> dict[int, dict[str, object]]:
    processes = entry["processes"]
    assert isinstance(processes, list)
    return {p["pid"]: p for p in processes}


def test_a_finished_drain_names_each_process_how_it_ended_and_when() -> None:
    entry = entry_from_record(record(), HOST)
    assert entry["id"] == DRAIN_ID
    assert entry["host"] == HOST
    assert entry["event_ids"] == ["ev-1"]
    assert entry["event"] == {"key": "instance/maintenance-event", "value": "TERMINATE_ON_HOST_MAINTENANCE"}
    assert entry["started"] == "2027-01-15T08:00:00.250Z"
    assert entry["deadline"] == "2027-01-15T08:05:00.250Z"
    assert parse_utc_text(str(entry["ended"])) == START + 300.2
    assert entry["dry_run"] is False
    a, b, c = (by_pid(entry)[p] for p in (101, 102, 103))
    assert (a["end"], a["exit_status"], a["signals"], a["user"]) == ("exited", 0, ["SIGTERM"], "root")
    assert a["sent_after"] == {"SIGTERM": 0.01}
    assert a["ended_after"] == 2.5
    assert (b["end"], b["signals"], b["exit_status"]) == ("killed", ["SIGTERM", "SIGKILL"], None)
    assert b["sent_after"] == {"SIGTERM": 0.01, "SIGKILL": 300.0}
    assert (c["end"], c["exit_signal"], c["detail"]) == ("exited", "SIGTERM", NO_HANDLER)
    assert c["user"] is None  # its owner was never known


def test_a_rehearsal_lists_what_would_be_sent_and_that_nothing_ended() -> None:
    entry = entry_from_record(record(dry_run=True), HOST)
    b = by_pid(entry)[102]
    assert b["signals"] == []  # nothing was sent: a script reading only `signals` is not misled
    assert b["would_send"] == ["SIGTERM", "SIGKILL"]  # what would have been, apart
    assert set(b["would_send_after"]) == {"SIGTERM", "SIGKILL"}
    assert b["end"] == "still_running"  # nothing was: it runs on
    assert b["ended_after"] is None


def test_a_resumed_drain_takes_the_earlier_signals_times_from_the_state_file() -> None:
    rec = DrainRecord(900.0, START, 1200.0, "kill", False)  # resumed at 1000.0: the first run's start
    rec.processes[A] = ProcessRecord(A, "trainer", (), 900.0)
    rec.processes[A].signals.append(SentSignal(signal.SIGTERM, None, SignalResult.SENT))  # before restart
    on_file = [
        SignalRecord(A, "trainer", "SIGTERM", START + 0.5, START + 0.6, "sent"),
        SignalRecord(B, "gone-job", "SIGTERM", START + 0.5, START + 0.7, "sent"),
        SignalRecord(C, "free-job", "SIGTERM", START + 0.5, None, None),  # intent only: possibly sent
    ]
    entry = entry_from_record(rec, HOST, on_file, alive=lambda identity: identity == C)
    a, b, c = (by_pid(entry)[p] for p in (101, 102, 103))
    assert a["sent_after"] == {"SIGTERM": 0.6}
    assert (b["end"], b["sent_after"]) == ("exited", {"SIGTERM": 0.7})  # ended while the daemon was down
    assert (c["end"], c["sent_after"]) == ("released", {"SIGTERM": 0.5})  # still runs, no longer holds


def test_a_drain_of_a_previous_boot_says_what_it_cannot_know() -> None:
    on_file = [
        SignalRecord(A, "trainer", "SIGTERM", START + 0.5, START + 0.6, "sent"),
        SignalRecord(B, "stubborn", "SIGTERM", START + 0.5, START + 0.6, "sent"),
        SignalRecord(B, "stubborn", "SIGKILL", START + 300, START + 300.1, "sent"),
        SignalRecord(C, "denied", "SIGTERM", START + 0.5, START + 0.6, "denied"),
    ]
    entry = entry_from_saved(OPENED, HOST, on_file, "interrupted", START + 400, "the host restarted")
    assert entry["outcome"] == "interrupted"
    a, b, c = (by_pid(entry)[p] for p in (101, 102, 103))
    assert (a["end"], b["end"]) == ("unknown", "killed")
    assert (c["signals"], c["not_sent"]) == ([], {"SIGTERM": "denied"})
    assert a["detail"] == "the host restarted"


def test_a_drain_just_started_has_no_outcome_and_no_processes_yet() -> None:
    entry = open_entry(OPENED, HOST)
    assert (entry["outcome"], entry["ended"], entry["processes"]) == (None, None, [])
    assert (entry["id"], entry["deadline"], entry["host"]) == (DRAIN_ID, "2027-01-15T08:05:00.250Z", HOST)


def test_a_uid_without_a_name_is_shown_as_its_number() -> None:
    assert user_name(0) == "root"
    assert user_name(4_000_000_000) == "4000000000"
    assert user_name(None) is None


def test_a_late_arrival_drain_lists_only_its_own_processes() -> None:
    """Its event's first drain signalled A and B before it started; only A still holds a device now."""
    late = DrainRecord(500.0, START, 550.0, "kill", False, late=True)
    late.processes[A] = ProcessRecord(A, "trainer", (), 500.0)
    late.processes[A].signals.append(SentSignal(signal.SIGTERM, None, SignalResult.SENT))  # the first drain's
    late.processes[C] = ProcessRecord(C, "restarted", (), 500.0, late_arrival=True)
    late.processes[C].signals.append(SentSignal(signal.SIGTERM, 500.5, SignalResult.SENT))
    on_file = [
        SignalRecord(A, "trainer", "SIGTERM", START - 60, START - 59.5, "sent"),
        SignalRecord(B, "old-job", "SIGTERM", START - 60, START - 59.5, "sent"),
        SignalRecord(C, "restarted", "SIGTERM", START + 0.5, START + 0.5, "sent"),
    ]
    entry = entry_from_record(late, HOST, on_file, alive=lambda _: True)
    assert sorted(by_pid(entry)) == [101, 103]  # not B: the first drain's, not this one's
    assert by_pid(entry)[101]["sent_after"] == {"SIGTERM": -59.5}  # before this drain began
    assert by_pid(entry)[103]["late_arrival"] is True


def test_a_real_time_signal_the_enum_lacks_is_named_by_its_number() -> None:
    rec = record()
    rec.processes[A].exit_status = ExitStatus(signal=40)  # SIGRTMIN+6: no name in signal.Signals
    assert by_pid(entry_from_record(rec, HOST))[101]["exit_signal"] == "signal 40"


def test_each_process_keeps_its_workload_and_one_known_only_from_the_state_file_has_none() -> None:
    rec = record()
    pod = Workload(pod_uid="8d3f5c2a-1b4e-4c6d-9e8f-0a1b2c3d4e5f", pod_namespace="ml", pod_name="trainer-0")
    rec.processes[A].workload = pod
    on_file = [
        SignalRecord(ProcessIdentity(104, 14), "gone-job", "SIGTERM", START + 0.5, START + 0.7, "sent")
    ]
    found = by_pid(entry_from_record(rec, HOST, on_file, alive=lambda _: False))
    assert found[101]["workload"] == pod.to_dict()
    assert Workload.from_dict(found[101]["workload"]) == pod  # what the history reads back
    assert (found[102]["workload"], found[104]["workload"]) == (None, None)  # not known


def test_a_reopened_drain_keeps_what_its_first_end_knew_of_the_processes_that_had_ended() -> None:
    """After a restart the reopened drain knows its earlier processes only from the state file; the entry of
    its first end knew more. The late arrival, and a process still running then, are as the record says."""
    first = entry_from_record(record(), HOST)
    late = ProcessIdentity(104, 14)
    again = record()
    for proc in again.processes.values():  # as the state file gives them back: no times, no exit status
        proc.devices, proc.exit_status, proc.ended_at = (), None, None
    again.processes[late] = ProcessRecord(late, "restarted", ("/dev/accel0",), 400.0, late_arrival=True)
    again.processes[late].signals.append(SentSignal(signal.SIGTERM, 400.0, SignalResult.SENT))
    again.processes[late].end, again.processes[late].ended_at = End.EXITED, 401.0
    entry = rejoined(first, entry_from_record(again, HOST))
    shown, before = by_pid(entry), by_pid(first)
    assert [shown[i.pid] for i in (A, B, C)] == [before[i.pid] for i in (A, B, C)]
    assert shown[late.pid]["late_arrival"]
    assert list(shown) == [A.pid, B.pid, C.pid, late.pid]
