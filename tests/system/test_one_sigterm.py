"""Every process that holds a device while an event is on gets exactly one SIGTERM, and nobody gets one
without an event: late arrivals, and restarts with an event on file whose clear the daemon did not hear.

A restart is played as the crash/restart tests do: the state file is written exactly as a daemon leaves it
when it dies (the only thing a kill -9 leaves behind), then a real daemon starts on it. Each child reports
every SIGTERM it receives on its own pipe, so the count is taken where it matters.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.support.daemon_harness import MAINTENANCE, DaemonHarness
from tests.support.ports import port_held
from tests.support.waiting import wait_for
from tests.support.workloads import Child, Workloads
from watchdog.core.lifecycle import ActiveDrain, Event
from watchdog.core.process import ProcessIdentity
from watchdog.fake.server import FakeMetadataServer, Fault
from watchdog.store.statefile import StateStore

TERMINATE = "TERMINATE_ON_HOST_MAINTENANCE"
SIGNALS = "tpu_watchdog_signals_sent_total"
GONE_JOB = ProcessIdentity(4_000_000, 1)  # the job the dead daemon signalled; long gone


def no_sigterm_within(child: Child, seconds: float) -> None:
    """Nothing arrives on the child's pipe for `seconds` (more than two of the daemon's 1 s rescans)."""
    with pytest.raises(AssertionError, match="said nothing"):
        child.expect("term", timeout=seconds)


def crashed_mid_event(
    state_dir: Path, deadline: float, drained: bool, signalled: ProcessIdentity = GONE_JOB, sent: bool = True
) -> None:
    """What a daemon killed mid-event leaves: the event, the drain (unless it had ended), its SIGTERM (or,
    `sent=False`, only its intent: killed between the write-ahead and the send)."""
    store = StateStore(str(state_dir))
    started = deadline - 30.0
    event = Event("ev-before", "maintenance-event", TERMINATE, started, drained, deadline)
    drain = None if drained else ActiveDrain(["ev-before"], started, deadline)
    store.save_lifecycle([event], drain, "exited" if drained else None, on_timeout="kill")
    store.record_intent(signalled, signal.SIGTERM, name="python3")
    if sent:
        store.record_sent(signalled, signal.SIGTERM, "sent")


# -- late arrivals -------------------------------------------------------------------------------------


def test_a_job_restarted_after_the_drain_gets_its_sigterm_and_the_events_deadline(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    first = workloads.start("handled")
    with DaemonHarness(state_dir, fake, workloads, maintenance_grace=4.0) as harness:
        fake.set(MAINTENANCE, TERMINATE)
        harness.wait_state("drained")
        assert first.popen.wait(timeout=10) == 0
        deadline = harness.daemon.lifecycle.events["maintenance-event"].deadline
        assert deadline is not None
        late = workloads.start("report")  # a supervisor restarted the job; this one ignores SIGTERM
        late.expect("term")
        assert late.popen.wait(timeout=20) == -signal.SIGKILL  # killed at the same deadline
        killed_at = time.time()
        assert deadline <= killed_at <= deadline + 1.5, killed_at - deadline
        harness.wait_state("timed_out")  # the drain it joined timed out: a late arrival was killed
        assert harness.metric("tpu_watchdog_drains_total", outcome="exited") == 1  # counted at its first end
        assert harness.metric("tpu_watchdog_drains_total", outcome="timed_out") == 0
        record = harness.daemon.last_record
        assert record is not None
        assert record.late
        assert record.outcome is not None
        assert record.outcome.value == "timed_out"
        assert record.processes[first.identity].end is not None  # one record: the first wave's too
        (entry,) = harness.daemon.recorder.history.entries()  # one drain, its entry rewritten
        assert (entry["id"], entry["outcome"]) == (record.drain_id, "timed_out")
        assert record.processes[late.identity].late_arrival
        assert harness.metric(SIGNALS, signal="SIGTERM") == 2  # one each, never a second


def test_a_late_arrival_that_leaves_on_sigterm_ends_its_drain_and_nobody_new_after_the_clear(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    workloads.start("handled")
    with DaemonHarness(state_dir, fake, workloads) as harness:
        fake.set(MAINTENANCE, TERMINATE)
        harness.wait_state("drained")
        second = workloads.start("handled")
        assert second.popen.wait(timeout=10) == 0  # exits 0 on its SIGTERM
        wait_for(lambda: len(harness.daemon.recorder.history.entries()[-1]["processes"]) == 2,
                 what="the late arrival in its event's drain")  # fmt: skip
        assert harness.metric("tpu_watchdog_drains_total", outcome="exited") == 1  # one event, one drain
        harness.wait_state("drained")
        fake.set(MAINTENANCE, "NONE")
        harness.wait_state("idle")
        after = workloads.start("report")
        no_sigterm_within(after, 2.5)
        assert harness.metric(SIGNALS, signal="SIGTERM") == 2


def test_a_process_signalled_once_is_not_signalled_again_when_it_reopens_the_device(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    releasing = workloads.start("release")  # closes the device on SIGTERM and keeps running
    with DaemonHarness(state_dir, fake, workloads, maintenance_grace=60.0) as harness:
        fake.set(MAINTENANCE, TERMINATE)
        releasing.expect("released")
        harness.wait_state("drained")
        releasing.reopen()
        wait_for(lambda: harness.daemon.view.holders, what="the reopened device in a late-arrival scan")
        no_sigterm_within(releasing, 2.5)  # the same process, the same event: no second SIGTERM
        assert harness.daemon.lifecycle.drain is None
        assert harness.metric(SIGNALS, signal="SIGTERM") == 1


# -- restarts: nobody new is signalled until the event is confirmed ------------------------------------


@pytest.mark.parametrize("drained", [False, True], ids=["draining on file", "drained on file"])
def test_a_restart_after_an_unheard_clear_signals_nobody(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path, drained: bool
) -> None:
    crashed_mid_event(state_dir, time.time() + 30.0, drained)
    fake.set(MAINTENANCE, "NONE")  # the event cleared while the daemon was down
    newcomer = workloads.start("report")  # a new job opened the device meanwhile
    with DaemonHarness(state_dir, fake, workloads) as harness:
        harness.wait_state("idle")
        no_sigterm_within(newcomer, 2.5)
        assert harness.metric(SIGNALS, signal="SIGTERM") == 0
        assert harness.metric(SIGNALS, signal="SIGKILL") == 0
    assert newcomer.alive()


@pytest.mark.parametrize("drained", [False, True], ids=["draining on file", "drained on file"])
def test_a_restart_with_the_event_still_on_signals_the_newcomer_once_it_is_confirmed(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path, drained: bool
) -> None:
    crashed_mid_event(state_dir, time.time() + 30.0, drained)
    fake.set(MAINTENANCE, TERMINATE)
    newcomer = workloads.start("report")
    with DaemonHarness(state_dir, fake, workloads) as harness:
        newcomer.expect("term")
        assert harness.daemon.lifecycle.events["maintenance-event"].confirmed
        harness.wait_metric(SIGNALS, 1, signal="SIGTERM")
        no_sigterm_within(newcomer, 2.5)  # once
        record = harness.daemon.view.record
        assert record is not None
        assert record.processes[newcomer.identity].late_arrival


def test_a_newcomer_held_back_after_a_restart_is_signalled_on_the_confirming_answer_not_a_scan_later(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The late-arrival watch scans every RESCAN_INTERVAL; the answer that confirms the event on file starts
    a scan at once. Here the interval is 60 s, so only that makes the SIGTERM come within the wait."""
    monkeypatch.setattr("watchdog.daemon.loop.RESCAN_INTERVAL", 60.0)
    crashed_mid_event(state_dir, time.time() + 30.0, drained=True)
    newcomer = workloads.start("report")
    fake.set(MAINTENANCE, TERMINATE)
    fake.add_fault(Fault(kind="reset", count=3, path=MAINTENANCE))  # the confirming answer comes later
    with DaemonHarness(state_dir, fake, workloads) as harness:
        wait_for(lambda: harness.daemon.view.holders, what="the first scan, the newcomer held back")
        newcomer.expect("term", timeout=15)
        assert harness.daemon.lifecycle.events["maintenance-event"].confirmed


def test_with_the_metadata_server_unreachable_a_restart_carries_on_until_the_deadline(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    crashed_mid_event(state_dir, time.time() + 30.0, drained=False)
    newcomer = workloads.start("report")
    address = fake.address
    fake.stop()  # nothing answers: the maintenance is then most likely still coming
    with (
        port_held(address),
        DaemonHarness(state_dir, fake, workloads, confirm_wait=1.0, wait_for_answers=False) as harness,
    ):
        assert harness.fake.address == address  # still pointed at the stopped server
        newcomer.expect("term", timeout=20)  # after the bounded wait, as planned
        assert not harness.daemon.lifecycle.events["maintenance-event"].confirmed


def test_with_the_metadata_server_unreachable_past_the_deadline_nobody_new_is_signalled(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    crashed_mid_event(state_dir, time.time() - 1.0, drained=True)
    newcomer = workloads.start("report")
    fake.stop()
    with (
        port_held(fake.address),
        DaemonHarness(state_dir, fake, workloads, confirm_wait=0.5, wait_for_answers=False) as harness,
    ):
        wait_for(
            lambda: harness.daemon.newcomers.gave_up_waiting,
            what="the daemon to give up waiting for metadata",
        )
        no_sigterm_within(newcomer, 2.5)
        assert harness.metric(SIGNALS, signal="SIGTERM") == 0


def test_a_job_signalled_before_the_restart_keeps_its_deadline_and_a_clear_heard_in_time_cancels_it(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    stubborn = workloads.start("report")  # got its SIGTERM from the dead daemon; ignores it
    crashed_mid_event(state_dir, time.time() + 30.0, drained=False, signalled=stubborn.identity)
    fake.set(MAINTENANCE, "NONE")  # cleared while the daemon was down; its deadline is still ahead
    with DaemonHarness(state_dir, fake, workloads) as harness:
        harness.wait_state("idle")
        assert harness.metric(SIGNALS, signal="SIGKILL") == 0
        record = harness.daemon.last_record
        assert record is not None
        assert record.outcome is not None
        assert record.outcome.value == "cancelled"
    assert stubborn.alive()
    no_sigterm_within(stubborn, 0.5)


def test_a_job_signalled_before_the_restart_is_killed_at_once_when_the_event_is_still_on(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    stubborn = workloads.start("report")
    crashed_mid_event(state_dir, time.time() - 1.0, drained=False, signalled=stubborn.identity)
    fake.set(MAINTENANCE, TERMINATE)
    with DaemonHarness(state_dir, fake, workloads):
        assert stubborn.popen.wait(timeout=20) == -signal.SIGKILL  # its deadline passed while we were down
    no_sigterm_within(stubborn, 0.5)  # and no second SIGTERM on the way


# -- a SIGTERM written ahead but perhaps never sent (kill -9 between the two) ------------------------------


def test_a_sigterm_only_intended_before_the_crash_kills_nobody_after_an_unheard_clear(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    """Soak seed 71: the job never got the SIGTERM the dead daemon had written ahead; the event cleared while
    no daemon ran; the next daemon, past the deadline, SIGKILLed it before any metadata answer."""
    job = workloads.start("report")
    crashed_mid_event(state_dir, time.time() - 1.0, drained=False, signalled=job.identity, sent=False)
    fake.set(MAINTENANCE, "NONE")
    fake.add_fault(Fault(kind="reset", count=3, path=MAINTENANCE))  # the answer comes after the resume
    with DaemonHarness(state_dir, fake, workloads) as harness:
        harness.wait_state("idle")
        no_sigterm_within(job, 2.5)
        assert harness.metric(SIGNALS, signal="SIGKILL") == 0
    assert job.alive()


@pytest.mark.parametrize("drained", [False, True], ids=["draining on file", "drained on file"])
def test_a_sigterm_only_intended_is_not_sent_again_and_its_job_is_killed_once_the_event_is_confirmed(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path, drained: bool
) -> None:
    job = workloads.start("report")
    crashed_mid_event(state_dir, time.time() - 1.0, drained=drained, signalled=job.identity, sent=False)
    fake.set(MAINTENANCE, TERMINATE)
    with DaemonHarness(state_dir, fake, workloads) as harness:
        assert job.popen.wait(timeout=20) == -signal.SIGKILL  # past its deadline: at once, once confirmed
        assert harness.daemon.lifecycle.events["maintenance-event"].confirmed
        assert harness.metric(SIGNALS, signal="SIGTERM") == 0  # possibly sent already: never a second
    no_sigterm_within(job, 0.5)


def test_a_late_arrival_after_a_restart_joins_the_drain_that_ended_before_it(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    """The state file keeps the ended drain while its event is on: a restarted daemon still knows the drain
    a late arrival joins, and the entry keeps what the first end knew of its processes."""
    first = workloads.start("handled")
    fake.set(MAINTENANCE, TERMINATE)
    with DaemonHarness(state_dir, fake, workloads, maintenance_grace=60.0) as harness:
        harness.wait_state("drained")
        assert first.popen.wait(timeout=10) == 0
        (before,) = harness.daemon.recorder.history.entries()
    with DaemonHarness(state_dir, fake, workloads, maintenance_grace=60.0) as harness:
        late = workloads.start("handled")
        assert late.popen.wait(timeout=20) == 0  # its SIGTERM, once the event is confirmed
        history = harness.daemon.recorder.history
        wait_for(lambda: len(history.entries()[-1]["processes"]) == 2, what="the late arrival in the drain")
        harness.wait_state("drained")
        (entry,) = history.entries()
        assert (entry["id"], entry["started"], entry["late"]) == (before["id"], before["started"], True)
        assert entry["processes"][0] == before["processes"][0]  # as its first end knew it
        assert entry["processes"][1]["late_arrival"]
        assert harness.metric("tpu_watchdog_drains_total", outcome="exited") == 0  # counted by the first run
