"""store/drain_text.py: a drain of the history in words, from entries of this version and of older ones."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from tests.core.test_drain_record import record as core_record
from tests.core.test_drain_record import rehearsal
from tests.store.test_drain_entry import HOST, A, B, record
from watchdog.core.drain_record import (
    INFERRED_DEATH,
    WOULD_DIE_OF_SIGTERM,
    End,
    ProcessRecord,
    SentSignal,
    SignalResult,
)
from watchdog.core.ladder import ladder_for
from watchdog.core.moments import RESUMED, HoldersFound
from watchdog.core.process import ProcessIdentity
from watchdog.core.vocabulary import Outcome, SigtermDisposition
from watchdog.store.drain_entry import entry_from_record
from watchdog.store.drain_text import (
    block,
    ended_line,
    one_line,
    process_line,
    processes_of,
    started_line,
    totals,
)
from watchdog.store.history import HISTORY_FILE, load_entries


def test_a_default_disposition_and_an_unknown_exit_status_read_as_a_death_of_sigterm_inferred() -> None:
    rec = record()
    proc = rec.processes[A]  # exited after SIGTERM; its parent reaped it, so its status is unknown
    proc.sigterm, proc.exit_status = SigtermDisposition.DEFAULT, None
    entry = entry_from_record(rec, HOST)
    [shown] = [p for p in entry["processes"] if p["pid"] == A.pid]  # type: ignore[attr-defined]
    assert (shown["sigterm"], shown["end"], shown["exit_status"]) == ("default", "exited", None)
    assert shown["detail"] == INFERRED_DEATH
    words = "\n".join(block(entry))
    [line] = [line for line in words.splitlines() if f" {A.pid} " in line]
    assert "exited after 2.50 s: died of SIGTERM's default action, inferred" in line, line
    assert "seen before the signal, so it saved no checkpoint" in line
    assert "2 died of SIGTERM's default action (no checkpoint)" in totals(entry)  # and C, its status seen


def test_a_caught_sigterm_with_an_unknown_status_is_a_plain_exit() -> None:
    rec = record()
    rec.processes[A].sigterm, rec.processes[A].exit_status = SigtermDisposition.CAUGHT, None
    entry = entry_from_record(rec, HOST)
    assert "1 exited on SIGTERM" in totals(entry)
    assert INFERRED_DEATH not in "\n".join(block(entry))


def test_a_killed_process_never_left_on_its_own() -> None:
    entry = entry_from_record(record(), HOST)
    [line] = [line for line in block(entry) if f" {B.pid} " in line]
    assert "SIGKILL +5.0 min killed, gone after 5.0 min: it never left on its own" in line, line


def test_an_entry_of_an_older_version_without_the_newer_fields_loads_and_reads(tmp_path: Path) -> None:
    """As a daemon before `sigterm` and `host` wrote it: the file stays loadable, the words the same."""
    old = {
        "version": 1, "id": "20270115T080000.250Z", "event": {"key": "instance/preempted", "value": "TRUE"},
        "event_ids": [], "late": False, "dry_run": False, "on_timeout": "kill",
        "started": "2027-01-15T08:00:00.250Z", "deadline": "2027-01-15T08:05:00.250Z",
        "ended": "2027-01-15T08:00:01.250Z", "duration": 1.0, "outcome": "exited", "notes": [],
        "processes": [{
            "pid": 7, "start_time": 1, "name": "jax", "user": "root", "uid": 0, "devices": [],
            "signals": ["SIGTERM"], "sent_after": {"SIGTERM": 0.0}, "not_sent": {}, "end": "exited",
            "ended_after": 1.0, "exit_status": None, "exit_signal": None, "late_arrival": False,
            "detail": None,
        }],
    }  # fmt: skip
    (tmp_path / HISTORY_FILE).write_text(json.dumps(old) + "\n")
    [entry] = load_entries(str(tmp_path / HISTORY_FILE))
    assert entry == old
    words = "\n".join(block(entry))
    assert "1 process: 1 exited on SIGTERM" in words
    assert "inferred" not in words  # no disposition on file: nothing to infer from


def test_status_and_history_give_a_reopened_drain_the_same_words() -> None:
    """`status`'s one line and `history`'s block: the same outcome, tags, start and duration."""
    entry = {**entry_from_record(record(), HOST), "late": True}
    line = one_line(entry)
    assert line.startswith(
        f"timed_out (reopened for a late arrival), started {entry['started']}, after 5.0 min: "
    )
    assert line.endswith(totals(entry))
    head = block(entry)[0]
    assert head.endswith("(reopened for a late arrival)")
    assert "after 5.0 min" in "\n".join(block(entry))


def test_the_totals_name_the_signal_that_asked_not_sigterm_always() -> None:
    """A ladder asking with SIGINT (core/ladder.py): the history says so, from the signals on the entry."""
    procs = [
        {"pid": 1, "end": "exited", "signals": ["SIGINT"]},
        {"pid": 2, "end": "killed", "signals": ["SIGINT", "SIGKILL"]},
        {"pid": 3, "end": "exited", "signals": []},
    ]
    assert totals({"processes": procs}) == (
        "3 processes: 1 exited on SIGINT, 1 killed at the deadline, 1 exited before being signalled"
    )
    rehearsal = [{**p, "would_send": p["signals"]} for p in procs]
    assert totals({"processes": rehearsal, "dry_run": True}) == (
        "3 processes: would send SIGINT to 2, SIGKILL to 1 at the deadline (dry run: nothing was sent)"
    )


def test_a_process_that_ended_before_the_restart_says_so_as_the_log_does() -> None:
    rec = record()
    proc = rec.processes[A]  # signalled and gone before a restart: the resumed run has no time for its end
    proc.ended_at, proc.exit_status = None, None
    entry = entry_from_record(rec, HOST)
    [line] = [line for line in block(entry) if f" {A.pid} " in line]
    assert "exited before the restart" in line, line
    assert "after ?" not in line


def test_a_rehearsal_s_process_reads_as_the_journal_forecasts_it() -> None:
    rec = rehearsal()
    entry = entry_from_record(rec, HOST)
    shown = [process_line(p, dry_run=True) for p in entry["processes"]]  # type: ignore[attr-defined]
    assert shown[0].endswith(f"still running ({WOULD_DIE_OF_SIGTERM})"), shown[0]
    assert shown[1].endswith("still running (SIGTERM ignored: a real drain would have SIGKILLed it)")
    assert all("after SIGKILL" not in line for line in shown)  # nothing was sent
    line = ended_line(entry)
    assert line.endswith("would send SIGTERM to 2, SIGKILL to 2 at the deadline (dry run: nothing was sent)")
    assert "killed at the deadline" not in line  # a rehearsal kills nobody, and loses nothing


def test_a_drain_s_end_in_one_line_names_who_lost_their_progress_at_the_deadline() -> None:
    """The journal's and a webhook's sentence: `status`'s line, each process counted once by its end, then
    who the deadline cost their progress: one SIGKILLed, one still holding a device (its SIGKILL denied)."""
    rec = core_record()  # 10 died of SIGTERM, 20 still running after a denied SIGKILL, 30 released
    stubborn = ProcessRecord(ProcessIdentity(40, 444), "hang", ("/dev/accel0",), 100.0, end=End.EXITED)
    stubborn.signals += [SentSignal(15, 100.0, SignalResult.SENT), SentSignal(9, 400.0, SignalResult.SENT)]
    stubborn.ended_at = 400.1
    rec.processes[stubborn.identity] = stubborn
    entry = entry_from_record(rec, HOST)
    line = ended_line(entry)
    assert "\n" not in line
    assert line == (
        f"drain {one_line(entry)}; killed at the deadline, progress since its last checkpoint lost: pid 40 "
        "(hang); still holding a device at the deadline, progress since its last checkpoint lost: pid 20 "
        "(stuck)"
    )
    assert totals(entry) == (
        "4 processes: 1 died of SIGTERM's default action (no checkpoint), 1 still running, 1 released the "
        "device and kept running, 1 killed at the deadline"
    )
    lines = {p["pid"]: process_line(p) for p in processes_of(entry)}
    assert "SIGTERM before the restart; not sent: SIGKILL (denied) still running" in lines[20], lines[20]
    assert "released the device after 2.00 s, still running" in lines[30]
    assert "killed, gone after 5.0 min" in lines[40], lines[40]
    assert "signal 9" not in lines[40]


def test_a_drain_that_did_not_time_out_names_nobody_lost_at_the_deadline() -> None:
    rec = core_record()
    rec.outcome = Outcome.CANCELLED  # the event went away: those still running were never killed
    line = ended_line(entry_from_record(rec, HOST))
    assert "progress since its last checkpoint lost" not in line, line
    assert line.startswith("drain cancelled, started ")


def test_a_drain_s_start_names_its_holders_and_one_with_none_says_nothing_is_sent() -> None:
    """`started_line`, the journal's first line of a drain and the drain_started webhook's text."""
    found = HoldersFound("preempted", "d1", False, 2, 2, ladder_for("kill"), False, None, 1000.0, 970.0)
    assert started_line(found) == (
        "draining 2 TPU holder(s) for preempted: SIGTERM now, deadline 1970-01-01T00:16:40.000Z (in 30 s), "
        "then SIGKILL what still holds a device"
    )
    rehearsal_start = started_line(replace(found, dry_run=True))
    assert "would send SIGTERM now" in rehearsal_start
    nobody = started_line(replace(found, holders=0, fresh=0))
    assert nobody == "draining for preempted: no process holds a TPU device, nothing to send"
    resumed = started_line(replace(found, cause=RESUMED, holders=0, fresh=0, started_wall=900.0))
    assert resumed.startswith("resumed drain d1 (started 1970-01-01T00:15:00.000Z): 0 TPU holder(s)")
