"""The notices' bodies, as a real receiver gets them: the host as the metadata server named it, the event
by its key, a one-line text a chat shows as it is, and a rehearsal marked as one."""

from __future__ import annotations

import signal
from dataclasses import replace

import pytest

from tests.support.waiting import wait_for
from tests.support.webhook_receiver import WebhookReceiver
from watchdog.core.clock import SystemClock
from watchdog.core.drain_record import (
    INFERRED_DEATH,
    DrainRecord,
    End,
    ExitStatus,
    ProcessRecord,
    SentSignal,
    SignalResult,
)
from watchdog.core.identity import HostIdentity
from watchdog.core.ladder import ladder_for
from watchdog.core.lifecycle import Event, Lifecycle
from watchdog.core.moments import RETRY, HoldersFound
from watchdog.core.process import ProcessIdentity
from watchdog.core.vocabulary import Outcome, SigtermDisposition
from watchdog.core.workload import Workload
from watchdog.daemon import notices
from watchdog.daemon.notices import Notices
from watchdog.store.drain_entry import entry_from_record
from watchdog.store.drain_text import ended_line, started_line
from watchdog.surface.webhooks import FailureReason, WebhookSender

HOST = HostIdentity(instance_id="42", instance_name="t1v-n-0", zone="us-central2-b", accelerator_type="v4-8",
                    worker_id="3", tpu_node="train-a").labels()  # fmt: skip
EVENT = Event("maintenance-event:TERMINATE_ON_HOST_MAINTENANCE@2026-12-01T16:31:03.006Z", "maintenance-event",
              "TERMINATE_ON_HOST_MAINTENANCE", 1796142663.006, deadline=1796142963.006)  # fmt: skip


def test_a_rehearsal_says_so_and_names_the_host_and_the_key() -> None:
    with WebhookReceiver(statuses=[]) as receiver:
        sender = WebhookSender([receiver.url], backoff=0.01)
        Notices(sender, lambda: HOST, SystemClock(), dry_run=True).event_started(EVENT)
        wait_for(lambda: receiver.delivered(), what="the notice")
        sender.close(1.0)
    (body,) = receiver.delivered()
    assert body["host"] == {"instance_id": "42", "name": "t1v-n-0", "zone": "us-central2-b",
                            "accelerator_type": "v4-8", "worker": "3", "tpu_node": "train-a",
                            "slice_hosts": "", "slice_id": "", "num_slices": "",
                            "multislice_coordinator": ""}  # fmt: skip
    assert body["event"] == {"key": "instance/maintenance-event", "value": "TERMINATE_ON_HOST_MAINTENANCE",
                             "id": EVENT.event_id}  # fmt: skip
    assert body["dry_run"] is True
    assert body["deadline"] == "2026-12-01T16:36:03.006Z"
    assert body["text"] == (
        "tpu-watchdog on t1v-n-0 (v4-8, us-central2-b, worker 3): [dry run] event started: "
        f"maintenance-event = TERMINATE_ON_HOST_MAINTENANCE (id {EVENT.event_id}); "
        "deadline 2026-12-01T16:36:03.006Z"
    )


@pytest.mark.parametrize(
    ("dry_run", "ask", "said"),
    [
        (True, signal.SIGTERM, "would send SIGTERM now"),
        (False, signal.SIGINT, "SIGINT now"),
        (False, signal.SIGTERM, "SIGTERM now"),
    ],
)
def test_a_drain_s_start_is_the_journal_s_sentence_with_the_ladder_s_signal(
    dry_run: bool, ask: int, said: str
) -> None:
    """drain_started says what the journal says (`started_line`): the holders, the ladder's asking signal
    (a rehearsal's "would send"), the deadline; a reopened drain names who still gets the signal."""
    found = HoldersFound("preempted", "d1", False, 3, 3, ladder_for("kill", ask=ask), dry_run, None,
                         EVENT.deadline or 0.0, (EVENT.deadline or 0.0) - 30.0)  # fmt: skip
    reopened = replace(found, cause="late", late=True, holders=4, fresh=1, started_wall=EVENT.first_seen)
    with WebhookReceiver(statuses=[]) as receiver:
        sender = WebhookSender([receiver.url], backoff=0.01)
        notices = Notices(sender, lambda: HOST, SystemClock(), dry_run=dry_run)
        notices.drain_started(EVENT, found)
        notices.drain_started(EVENT, reopened)
        wait_for(lambda: len(receiver.delivered()) == 2, what="the notices")
        sender.close(1.0)
    first, second = receiver.delivered()
    assert str(first["text"]).endswith(f": {'[dry run] ' if dry_run else ''}{started_line(found)}")
    assert f"draining 3 TPU holder(s) for preempted: {said}, deadline 2026-12-01T16:36:03.006Z (in 30 s)" in (
        str(first["text"])
    )
    assert (first["holders"], first["drain_id"], first["late"]) == (3, "d1", False)
    assert first["deadline"] == "2026-12-01T16:36:03.006Z"
    assert "late arrival: reopened drain d1 (started 2026-12-01T16:31:03.006Z)" in str(second["text"])
    assert f"{said} to the 1 not yet signalled" in str(second["text"])
    assert (second["holders"], second["late"]) == (4, True)


def test_a_drain_is_told_started_once_even_when_its_first_attempt_failed_before_its_holders() -> None:
    """A first attempt whose scans all failed never had its holders: its retry is the drain's first
    drain_started. A retry of a drain told already is the same drain; a reopened one is told again."""
    deadline = EVENT.deadline or 0.0
    retry = HoldersFound(RETRY, "d1", False, 2, 2, ladder_for("kill"), False, EVENT.first_seen, deadline,
                         deadline - 30.0)  # fmt: skip
    first = replace(retry, cause="preempted", started_wall=None)
    lifecycle = Lifecycle()
    with WebhookReceiver(statuses=[]) as receiver:
        sender = WebhookSender([receiver.url], backoff=0.01)
        failed_first = Notices(sender, lambda: HOST, SystemClock(), dry_run=False)
        failed_first.told(retry, lifecycle)  # the first attempt failed: nothing was told of the drain
        failed_first.told(retry, lifecycle)  # a second retry: told already
        failed_first.told(replace(retry, cause="late", late=True, fresh=1), lifecycle)  # reopened
        told_first = Notices(sender, lambda: HOST, SystemClock(), dry_run=False)
        told_first.told(first, lifecycle)
        told_first.told(retry, lifecycle)  # the same drain, told at its first attempt
        sender.close(1.0)
    texts = [str(body["text"]) for body in receiver.delivered()]
    assert [body["type"] for body in receiver.delivered()] == ["drain_started"] * 3, texts
    assert "retry drain d1 (started 2026-12-01T16:31:03.006Z): 2 TPU holder(s)" in texts[0]
    assert "late arrival: reopened drain d1" in texts[1]
    assert "draining 2 TPU holder(s) for preempted: SIGTERM now" in texts[2]


def test_drain_finished_tells_each_process_and_who_was_killed() -> None:
    record = DrainRecord(
        100.0, 1796142663.0, 400.0, "kill", dry_run=False, outcome=Outcome.TIMED_OUT, ended=400.1
    )
    sent = SignalResult.SENT
    for pid, name, signals, end, status in [
        (7, "train", [signal.SIGTERM], End.EXITED, ExitStatus(code=0)),
        (8, "stuck", [signal.SIGTERM, signal.SIGKILL], End.EXITED, ExitStatus()),
        (9, "loader", [signal.SIGTERM], End.RELEASED, None),
        (10, "nohandler", [signal.SIGTERM], End.EXITED, ExitStatus()),
    ]:
        identity = ProcessIdentity(pid, 1000 + pid)
        record.processes[identity] = ProcessRecord(
            identity, name, ("/dev/accel0",), 100.0, [SentSignal(s, 100.0, sent) for s in signals],
            end, 200.0, status,
        )  # fmt: skip
    record.processes[ProcessIdentity(10, 1010)].sigterm = SigtermDisposition.DEFAULT
    with WebhookReceiver(statuses=[]) as receiver:
        sender = WebhookSender([receiver.url], backoff=0.01)
        Notices(sender, dict, SystemClock(), dry_run=False).drain_finished(
            EVENT, entry_from_record(record, {}), "20261201T163103.006Z"
        )
        wait_for(lambda: receiver.delivered(), what="the notice")
        sender.close(1.0)
    (body,) = receiver.delivered()
    assert (body["outcome"], body["drain_id"], body["started"]) == ("timed_out", "20261201T163103.006Z",
                                                                    "2026-12-01T16:31:03.000Z")  # fmt: skip
    # The history's words and types: `exit_status` the code (a number), `exit_signal` the signal's name.
    assert [
        (p["pid"], p["signals"], p["end"], p["exit_status"], p["exit_signal"]) for p in body["processes"]
    ] == [
        (7, ["SIGTERM"], "exited", 0, None),
        (8, ["SIGTERM", "SIGKILL"], "killed", None, None),
        (9, ["SIGTERM"], "released", None, None),
        (10, ["SIGTERM"], "exited", None, None),
    ]
    # Why it ended as the history says it (no SIGTERM handler: unsaved), and which process it was.
    told = {p["pid"]: p for p in body["processes"]}
    assert told[10]["detail"] == INFERRED_DEATH
    assert (told[7]["start_time"], told[7]["late_arrival"], told[7]["detail"]) == (1007, False, None)
    assert body["text"].endswith(
        "; killed at the deadline, progress since its last checkpoint lost: pid 8 (stuck)"
    )


def test_who_was_killed_is_named_by_pod_or_unit() -> None:
    record = DrainRecord(started=100.0, started_wall=1_800_000_000.0, deadline=130.0, on_timeout="kill",
                         dry_run=False, outcome=Outcome.TIMED_OUT, ended=131.0)  # fmt: skip
    pod = Workload(pod_uid="8d3f5c2a-1b4e-4c6d-9e8f-0a1b2c3d4e5f", pod_namespace="ml", pod_name="trainer-0")
    for pid, workload in [(8, pod), (9, Workload(unit="train.service")), (10, None)]:
        identity = ProcessIdentity(pid, 1000 + pid)
        killed = [SentSignal(signal.SIGKILL, 130.0, SignalResult.SENT)]
        record.processes[identity] = ProcessRecord(
            identity, "python3", ("/dev/accel0",), 100.0, killed, End.EXITED, 131.0, workload=workload
        )
    entry = entry_from_record(record, {})
    assert ended_line(entry).endswith(
        "lost: pid 8 (python3, pod ml/trainer-0), pid 9 (python3, unit train.service), pid 10 (python3)"
    )
    told = {p["pid"]: p for p in notices.processes_told(entry)}
    assert told[8]["workload"] == pod.to_dict()


def test_a_replaced_sender_gives_up_within_its_time_and_says_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A reload's `use` returns at once while the old receiver holds every answer; the old sender stops
    after RETIRE_TIMEOUT, counting what it still had queued as `stopped`, for a reason that is true."""
    monkeypatch.setattr(notices, "RETIRE_TIMEOUT", 0.5)
    failures: list[FailureReason] = []
    with WebhookReceiver(statuses=[]) as receiver:
        receiver.hold()
        old = WebhookSender([receiver.url], backoff=0.01, on_failed=failures.append)
        told = Notices(old, lambda: HOST, SystemClock(), dry_run=False)
        told.event_started(EVENT)  # in flight, unanswered
        told.event_cleared(EVENT)  # queued behind it
        wait_for(lambda: receiver.holding == 1, what="the first notice in flight")
        told.use(None)  # returns at once: nothing here waits for the receiver
        told.event_cleared(EVENT)  # goes nowhere
        wait_for(lambda: failures == [FailureReason.STOPPED], what="the queued notice given up")
        assert told.webhooks() == []
    assert (
        "event_cleared notice not delivered: a reload replaced the webhooks before it was sent" in caplog.text
    )
