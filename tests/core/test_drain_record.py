"""The drain record: exit statuses decoded, how each process ended and what it lost (its JSON is the history
entry, tests/store/test_drain_entry.py; in words: tests/store/test_drain_text.py)."""

from __future__ import annotations

import signal

import pytest

from watchdog.core.drain_record import (
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


def test_a_finished_drain_says_when_each_was_signalled_and_who_lost_their_progress() -> None:
    r = record()
    a, b, c = r.processes.values()
    assert (a.public_end().value, a.killed, c.public_end().value) == ("exited", False, "released")
    assert a.signalled_at is not None
    assert r.wall(a.signalled_at) == 1_700_000_000.0
    assert b.signalled_at is None  # sent by an earlier run: time unknown
    # died of SIGTERM, and still running after a SIGKILL that failed
    assert [p.loss() for p in (a, b, c)] == [Loss.SIGTERM_DEFAULT, Loss.STILL_RUNNING, None]


def test_pending_lists_processes_not_yet_ended() -> None:
    assert record().pending() == [ProcessIdentity(20, 222)]


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
    r.outcome, r.ended = Outcome.EXITED, 3.0
    assert (early.loss(), saved.loss()) == (Loss.SIGTERM_DEFAULT, None)


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


def rehearsal() -> DrainRecord:
    """A dry run timed out: one holder without a SIGTERM handler, one ignoring SIGTERM."""
    record = DrainRecord(started=0.0, started_wall=1.7e9, deadline=300.0, on_timeout="kill", dry_run=True)
    for pid, disposition in ((3, SigtermDisposition.DEFAULT), (4, SigtermDisposition.IGNORED)):
        proc = ProcessRecord(ProcessIdentity(pid, 1), "job", ("/dev/accel0",), 0.0, sigterm=disposition)
        proc.signals += [SentSignal(15, 0.0, SignalResult.SENT), SentSignal(9, 300.0, SignalResult.SENT)]
        record.processes[proc.identity] = proc
    record.outcome, record.ended = Outcome.TIMED_OUT, 301.0
    return record
