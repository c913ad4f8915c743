"""The drain record: exit statuses decoded and rendered, and the record as an SRE sees it (its JSON is the
history entry: tests/store/test_drain_entry.py)."""

from __future__ import annotations

import signal

import pytest

from watchdog.core.drain_record import (
    WOULD_DIE_OF_SIGTERM,
    Death,
    DrainRecord,
    End,
    ExitStatus,
    Loss,
    ProcessRecord,
    SentSignal,
    SignalResult,
)
from watchdog.core.process import ProcessIdentity
from watchdog.core.vocabulary import Outcome, SigtermDisposition


@pytest.mark.parametrize(
    ("status", "text"),
    [
        (0, "exited 0"),
        (3 << 8, "exited 3"),
        (15, "killed by SIGTERM"),
        (9, "killed by SIGKILL"),
        (9 | 0x80, "killed by SIGKILL"),  # core dumped
    ],
)
def test_wait_status_decoding(status: int, text: str) -> None:
    assert str(ExitStatus.from_wait_status(status)) == text


def test_unknown_status() -> None:
    assert str(ExitStatus()) == "unknown"
    assert not ExitStatus().known


def record() -> DrainRecord:
    r = DrainRecord(
        started=100.0, started_wall=1_700_000_000.0, deadline=400.0, on_timeout="kill", dry_run=False
    )
    a = ProcessIdentity(10, 111)
    b = ProcessIdentity(20, 222)
    c = ProcessIdentity(30, 333)
    r.processes[a] = ProcessRecord(a, "train", ("/dev/accel0",), 100.0)
    r.processes[a].signals.append(SentSignal(signal.SIGTERM, 100.0, SignalResult.SENT))
    r.processes[a].end, r.processes[a].ended_at = End.EXITED, 101.5
    r.processes[a].exit_status = ExitStatus(signal=15)
    r.processes[b] = ProcessRecord(b, "stuck", ("/dev/accel1",), 100.0)
    r.processes[b].signals += [
        SentSignal(signal.SIGTERM, None, SignalResult.SENT),
        SentSignal(signal.SIGKILL, 400.0, SignalResult.DENIED),
    ]
    r.processes[c] = ProcessRecord(c, "eval", ("/dev/accel0",), 100.5)
    r.processes[c].end, r.processes[c].ended_at = End.RELEASED, 102.0
    r.outcome, r.ended = Outcome.TIMED_OUT, 410.0
    r.notes.append("1 process(es) still running after SIGKILL")
    return r


def test_summary_says_who_blocked_and_why() -> None:
    text = record().summary()
    assert text.splitlines()[0].startswith("drain timed_out after 310.00 s (deadline +300.0 s")
    assert "10@111 train; SIGTERM sent +0.00 s; exited (killed by SIGTERM) at +1.50 s" in text
    assert "no checkpoint" in text
    assert (
        "20@222 stuck; SIGTERM sent before the restart; SIGKILL not sent (denied) +300.00 s; still running"
        in text
    )
    assert "30@333 eval; released the device at +2.00 s, still running (not killed)" in text
    assert "note: 1 process(es) still running after SIGKILL" in text


def test_a_finished_drain_says_when_each_was_signalled_and_who_lost_their_progress() -> None:
    r = record()
    a, b, c = r.processes.values()
    assert (a.public_end().value, a.killed, c.public_end().value) == ("exited", False, "released")
    assert a.signalled_at is not None
    assert r.wall(a.signalled_at) == 1_700_000_000.0
    assert b.signalled_at is None  # sent by an earlier run: time unknown
    # died of SIGTERM, and still running after a SIGKILL that failed
    assert r.losses() == {a.identity: Loss.SIGTERM_DEFAULT, b.identity: Loss.STILL_RUNNING}


def test_pending_lists_processes_not_yet_ended() -> None:
    assert record().pending() == [ProcessIdentity(20, 222)]


def test_one_line_summary_counts_how_processes_ended() -> None:
    record = DrainRecord(started=0.0, started_wall=1.7e9, deadline=300.0, on_timeout="kill", dry_run=False)
    ok = ProcessRecord(ProcessIdentity(1, 1), "ok", ("/dev/accel0",), 0.0, end=End.EXITED, ended_at=2.0)
    ok.exit_status = ExitStatus(code=0)
    default = ProcessRecord(ProcessIdentity(2, 1), "jax", ("/dev/accel0",), 0.0, end=End.EXITED, ended_at=1.0)
    default.exit_status = ExitStatus(signal=15)
    stubborn = ProcessRecord(ProcessIdentity(3, 1), "hang", ("/dev/accel0",), 0.0, end=End.EXITED)
    stubborn.signals.append(SentSignal(9, 300.0, SignalResult.SENT))
    for proc in (ok, default, stubborn):
        record.processes[proc.identity] = proc
    record.outcome, record.ended = Outcome.TIMED_OUT, 301.0
    line = record.one_line()
    assert "\n" not in line
    # Each process counted once, by how it ended; the losses apart, never as one more process.
    assert line == (
        "drain timed_out after 301.00 s: 3 process(es): 1 exited, 1 died of SIGTERM's default action, "
        "1 killed (2 of them lost their progress)"
    )


def test_a_rehearsal_says_what_would_have_been_killed_not_that_it_was() -> None:
    record = DrainRecord(started=0.0, started_wall=1.7e9, deadline=300.0, on_timeout="kill", dry_run=True)
    hang = ProcessRecord(ProcessIdentity(3, 1), "hang", ("/dev/accel0",), 0.0)
    hang.signals += [SentSignal(15, 0.0, SignalResult.SENT), SentSignal(9, 300.0, SignalResult.SENT)]
    record.processes[hang.identity] = hang
    record.outcome, record.ended = Outcome.TIMED_OUT, 301.0
    line = record.one_line()
    assert "1 would have been killed" in line, line
    assert ": 1 killed" not in line
    assert line.endswith("(dry run: nothing was sent)")


@pytest.mark.parametrize(
    ("status", "died"),
    [
        (ExitStatus(signal=15), True),
        (ExitStatus(code=143), True),  # a shell running the job reports its child's SIGTERM death so
        (ExitStatus(code=0), False),
        (ExitStatus(code=1), False),
        (ExitStatus(signal=9), False),
        (ExitStatus(), False),
    ],
)
def test_died_of_sigterm(status: ExitStatus, died: bool) -> None:
    assert status.died_of_sigterm is died


def test_a_drain_that_exited_still_reports_the_job_that_died_of_sigterm_as_lost() -> None:
    """A MaxText job SIGTERMed before its distributed initialisation exits 143 having saved nothing: the
    drain's outcome is `exited` (everything exited in time), but the record says the progress is lost."""
    r = DrainRecord(started=0.0, started_wall=1.7e9, deadline=300.0, on_timeout="kill", dry_run=False)
    early = ProcessRecord(ProcessIdentity(7, 1), "python3.12", ("/dev/accel0",), 0.0)
    early.signals.append(SentSignal(signal.SIGTERM, 0.0, SignalResult.SENT))
    early.end, early.ended_at, early.exit_status = End.EXITED, 0.1, ExitStatus(code=143)
    saved = ProcessRecord(ProcessIdentity(8, 1), "python3.12", ("/dev/accel0",), 0.0)
    saved.end, saved.ended_at, saved.exit_status = End.EXITED, 3.0, ExitStatus(code=0)
    r.processes = {early.identity: early, saved.identity: saved}
    assert r.losses() == {}  # not yet: the drain has not ended
    r.outcome, r.ended = Outcome.EXITED, 3.0
    assert r.losses() == {early.identity: Loss.SIGTERM_DEFAULT}
    assert "(1 of them lost their progress)" in r.one_line()
    assert "saved no checkpoint" in r.summary()
    r.dry_run = True
    assert r.losses() == {}  # a dry run sent nothing, so it cost nothing


@pytest.mark.parametrize(
    ("disposition", "status", "signalled", "death"),
    [
        (SigtermDisposition.DEFAULT, None, True, Death.INFERRED),  # its parent reaped it: the usual case
        (SigtermDisposition.DEFAULT, ExitStatus(), True, Death.INFERRED),
        (SigtermDisposition.DEFAULT, ExitStatus(code=0), True, None),  # it said otherwise: believed
        (SigtermDisposition.DEFAULT, None, False, None),  # never signalled: nothing to infer
        (SigtermDisposition.CAUGHT, ExitStatus(), True, None),
        (SigtermDisposition.IGNORED, ExitStatus(), True, None),
        (None, ExitStatus(), True, None),  # /proc did not say
        (SigtermDisposition.CAUGHT, ExitStatus(signal=15), True, Death.SEEN),  # the status outranks it
    ],
)
def test_a_death_of_sigterm_s_default_action_is_seen_or_inferred_from_the_disposition(
    disposition: SigtermDisposition | None, status: ExitStatus | None, signalled: bool, death: Death | None
) -> None:
    proc = ProcessRecord(ProcessIdentity(7, 1), "jax", ("/dev/accel0",), 0.0, sigterm=disposition)
    if signalled:
        proc.signals.append(SentSignal(signal.SIGTERM, 0.0, SignalResult.SENT))
    proc.end, proc.ended_at, proc.exit_status = End.EXITED, 0.05, status
    assert proc.sigterm_death is death
    assert (proc.loss() is Loss.SIGTERM_DEFAULT) is (death is not None)
    line = proc.describe(0.0)
    assert ("inferred" in line) is (death is Death.INFERRED), line


def test_a_process_s_end_is_said_in_the_history_s_words() -> None:
    """`exited` (never `unknown`) for a process whose exit status could not be read, `killed` once (never
    `killed by signal 9` beside `killed by SIGKILL`): the words `ProcessEnd` gives every surface."""
    gone = ProcessRecord(ProcessIdentity(1, 1), "jax", ("/dev/accel0",), 0.0, end=End.EXITED, ended_at=5.56)
    gone.signals.append(SentSignal(signal.SIGTERM, 0.0, SignalResult.SENT))
    gone.exit_status = ExitStatus()
    killed = ProcessRecord(
        ProcessIdentity(2, 1), "hang", ("/dev/accel0",), 0.0, end=End.EXITED, ended_at=30.2
    )
    killed.signals += [SentSignal(15, 0.0, SignalResult.SENT), SentSignal(9, 30.0, SignalResult.SENT)]
    killed.exit_status = ExitStatus(signal=9)
    assert gone.describe(0.0).endswith("; exited at +5.56 s")
    assert gone.public_end().value == "exited"
    said = killed.describe(0.0)
    assert said.endswith("; killed at +30.20 s"), said
    assert "signal 9" not in said
    assert killed.public_end().value == "killed"


def test_a_rehearsal_s_process_is_still_running_never_after_a_sigkill() -> None:
    hang = ProcessRecord(ProcessIdentity(3, 1), "hang", ("/dev/accel0",), 0.0)
    hang.signals += [SentSignal(15, 0.0, SignalResult.SENT), SentSignal(9, 300.0, SignalResult.SENT)]
    said = hang.describe(0.0, dry_run=True)
    assert "after SIGKILL" not in said  # nothing was sent
    assert said.endswith(
        "still running (a real drain would have SIGKILLed it, unless its SIGTERM made it leave first)"
    )
    assert hang.public_end(dry_run=True).value == "still_running"


def rehearsal() -> DrainRecord:
    """A dry run timed out: one holder without a SIGTERM handler, one ignoring SIGTERM."""
    record = DrainRecord(started=0.0, started_wall=1.7e9, deadline=300.0, on_timeout="kill", dry_run=True)
    for pid, disposition in ((3, SigtermDisposition.DEFAULT), (4, SigtermDisposition.IGNORED)):
        proc = ProcessRecord(ProcessIdentity(pid, 1), "job", ("/dev/accel0",), 0.0, sigterm=disposition)
        proc.signals += [SentSignal(15, 0.0, SignalResult.SENT), SentSignal(9, 300.0, SignalResult.SENT)]
        record.processes[proc.identity] = proc
    record.outcome, record.ended = Outcome.TIMED_OUT, 301.0
    return record


def test_a_rehearsal_forecasts_each_process_by_its_sigterm_disposition_as_the_status_does() -> None:
    """A process without a SIGTERM handler would not have been SIGKILLed: its SIGTERM would have killed it.
    (`status` and `history` say the same: tests/store/test_drain_text.py.)"""
    record = rehearsal()
    line = record.one_line()
    assert "1 would have died of SIGTERM's default action, 1 would have been killed" in line, line
    default, ignored = (p.describe(0.0, dry_run=True) for p in record.processes.values())
    assert default.endswith(f"still running ({WOULD_DIE_OF_SIGTERM})"), default
    assert ignored.endswith("still running (SIGTERM ignored: a real drain would have SIGKILLed it)"), ignored
