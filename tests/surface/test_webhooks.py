"""The webhook sender against a real HTTP receiver on loopback: retries after a 503, gives up on a 4xx,
counts what it could not deliver, drops the oldest notice when a receiver falls behind, never blocks the
caller, and never writes the URL (a secret) in a log line or its status."""

from __future__ import annotations

import logging
import socket

import pytest

from tests.support.failing_logs import every_line_raising
from tests.support.waiting import wait_for
from tests.support.webhook_receiver import SECRET_PATH, WebhookReceiver
from watchdog.core.vocabulary import Output
from watchdog.daemon.outputs import Outputs
from watchdog.surface.metrics import Metrics
from watchdog.surface.webhooks import FailureReason, WebhookSender


class Counts:
    def __init__(self) -> None:
        self.sent = 0
        self.failed: list[FailureReason] = []

    def on_sent(self) -> None:
        self.sent += 1

    def on_failed(self, reason: FailureReason) -> None:
        self.failed.append(reason)


def sender(urls: list[str], counts: Counts, **kwargs: object) -> WebhookSender:
    return WebhookSender(urls, on_sent=counts.on_sent, on_failed=counts.on_failed, backoff=0.01, **kwargs)  # type: ignore[arg-type]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_503_is_tried_again_and_the_notice_arrives_once(caplog: pytest.LogCaptureFixture) -> None:
    counts = Counts()
    caplog.set_level(logging.DEBUG)
    with WebhookReceiver(statuses=[503]) as receiver:
        hooks = sender([receiver.url], counts)
        hooks.submit({"type": "event_started", "text": "hello"})
        wait_for(lambda: counts.sent, what="the notice delivered")
        hooks.close(1.0)
    assert [a.status for a in receiver.arrivals] == [503, 200]
    assert receiver.delivered() == [{"type": "event_started", "text": "hello"}]
    assert counts.failed == []
    assert hooks.status()[0]["sent"] == 1
    assert all(SECRET_PATH not in r.getMessage() for r in caplog.records)


def test_a_process_name_that_is_not_utf8_is_delivered_escaped_not_lost() -> None:
    """psutil decodes such a name with surrogateescape: UTF-8 cannot carry it, and the notice was lost."""
    counts = Counts()
    name = b"tr\xffin".decode("utf-8", "surrogateescape")
    with WebhookReceiver(statuses=[]) as receiver:
        hooks = sender([receiver.url], counts)
        hooks.submit({"type": "process_signalled", "name": name})
        wait_for(lambda: counts.sent, what="the notice delivered")
        hooks.close(1.0)
    assert receiver.delivered() == [{"type": "process_signalled", "name": name}]  # its JSON escape, decoded
    assert counts.failed == []


def test_a_4xx_is_not_tried_again_and_is_counted_as_rejected() -> None:
    counts = Counts()
    with WebhookReceiver(statuses=[400]) as receiver:
        hooks = sender([receiver.url], counts)
        hooks.submit({"type": "drain_started"})
        wait_for(lambda: counts.failed, what="the rejection counted")
        hooks.close(1.0)
    assert [a.status for a in receiver.arrivals] == [400]
    assert counts.failed == [FailureReason.REJECTED]
    assert hooks.status()[0]["last_error"] == "HTTP 400: refused, not retried"


def test_a_receiver_that_keeps_failing_gets_every_try_then_a_counted_failure() -> None:
    counts = Counts()
    with WebhookReceiver(statuses=[503, 500, 502, 200]) as receiver:
        hooks = sender([receiver.url], counts, tries=3)
        hooks.submit({"type": "drain_finished"})
        wait_for(lambda: counts.failed, what="the failure counted")
        hooks.close(1.0)
    assert [a.status for a in receiver.arrivals] == [503, 500, 502]
    assert (counts.sent, counts.failed) == (0, [FailureReason.RETRIES_EXHAUSTED])


def test_connection_errors_are_said_in_words_and_the_url_never_appears(
    caplog: pytest.LogCaptureFixture,
) -> None:
    counts = Counts()
    caplog.set_level(logging.DEBUG)
    url = f"http://127.0.0.1:{closed_port()}{SECRET_PATH}?token=also-secret"
    hooks = sender([url], counts, tries=2)
    hooks.submit({"type": "event_cleared"})
    wait_for(lambda: counts.failed, what="the failure counted")
    hooks.close(1.0)
    assert counts.failed == [FailureReason.RETRIES_EXHAUSTED]
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "connection refused after 2 attempt(s)" in text
    assert "webhook 1 (http://127.0.0.1:" in text
    assert "/…redacted)" in text
    assert SECRET_PATH not in text
    assert "also-secret" not in text
    assert SECRET_PATH not in str(hooks.status())


def test_a_full_queue_drops_the_oldest_and_never_blocks_the_caller() -> None:
    counts = Counts()
    with WebhookReceiver(statuses=[]) as receiver:
        receiver.hold()
        hooks = sender([receiver.url], counts, queue_size=3)
        hooks.submit({"type": "first", "n": 0})
        wait_for(lambda: receiver.holding == 1, what="the first notice held by the receiver")
        for n in range(1, 8):  # returns while the receiver holds the first: submit never waits on it
            hooks.submit({"type": "more", "n": n})
        assert counts.failed == [FailureReason.QUEUE_FULL] * 4
        receiver.release()
        wait_for(lambda: counts.sent == 4, what="the first and the three newest delivered")
        hooks.close(1.0)
    assert [body["n"] for body in receiver.delivered()] == [0, 5, 6, 7]


def test_each_url_gets_every_notice_on_its_own_thread() -> None:
    counts = Counts()
    with WebhookReceiver(statuses=[]) as slow, WebhookReceiver(statuses=[]) as fast:
        slow.hold()
        hooks = sender([slow.url, fast.url], counts)
        hooks.submit({"type": "event_started"})
        wait_for(
            lambda: fast.types() == ["event_started"], what="the second webhook served while the first hangs"
        )
        slow.release()
        wait_for(lambda: counts.sent == 2, what="both delivered")
        hooks.close(1.0)


def test_what_is_still_queued_when_the_daemon_stops_is_counted_not_lost_silently() -> None:
    counts = Counts()
    with WebhookReceiver(statuses=[]) as receiver:
        receiver.hold()
        hooks = sender([receiver.url], counts)
        for n in range(3):
            hooks.submit({"type": "notice", "n": n})
        wait_for(lambda: receiver.holding == 1, what="the first notice held by the receiver")
        assert hooks.close(0.1) is False
        receiver.release()
    assert counts.failed == [FailureReason.STOPPED] * 2  # the one in flight was sent; two never were


def errors(metrics: Metrics, output: Output) -> float | None:
    return metrics.registry.get_sample_value("tpu_watchdog_output_errors_total", {"output": output.value})


def test_a_counter_and_a_log_that_raise_end_nothing_the_next_notice_arrives() -> None:
    """A failure's counter raising, then the line of that failure raising too, once ended the webhook's
    thread: every later notice was queued for nobody. Each is the daemon's output error, counted."""

    def raising(reason: FailureReason) -> None:
        raise RuntimeError("the metric is broken")

    delivered, metrics = Counts(), Metrics()
    with WebhookReceiver(statuses=[400]) as receiver, every_line_raising("tpu-watchdog") as lines:
        hooks = WebhookSender(
            [receiver.url], on_sent=delivered.on_sent, on_failed=raising, backoff=0.01,
            guarded=Outputs(metrics).guarded,
        )  # fmt: skip
        hooks.submit({"type": "event_started", "text": "rejected"})
        wait_for(lambda: lines.refused("notice not delivered"), what="the failure's line, refused")
        hooks.submit({"type": "drain_finished", "text": "after it"})
        wait_for(lambda: delivered.sent, what="the next notice delivered")
        hooks.close(1.0)
    assert receiver.delivered()[-1] == {"type": "drain_finished", "text": "after it"}
    assert (errors(metrics, Output.METRICS), errors(metrics, Output.LOG)) == (1, 1)
    assert not lines.refused("unexpected failure")  # each failure ended its own output only


def test_a_delivered_notice_whose_counter_raises_is_delivered_not_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The delivered counter raising once made the sender say the notice was lost, and the daemon's output
    errors never saw it: now the notice is delivered (status and the receiver agree) and the counter's
    failure is a counted metrics error."""

    def raising() -> None:
        raise RuntimeError("the metric is broken")

    failed, metrics = Counts(), Metrics()
    with WebhookReceiver(statuses=[]) as receiver:
        hooks = WebhookSender(
            [receiver.url], on_sent=raising, on_failed=failed.on_failed, guarded=Outputs(metrics).guarded
        )
        hooks.submit({"type": "drain_started"})
        wait_for(lambda: hooks.status()[0]["sent"] == 1, what="the notice counted as delivered")
        hooks.close(1.0)
    assert receiver.types() == ["drain_started"]
    assert failed.failed == []
    assert errors(metrics, Output.METRICS) == 1
    assert not any("unexpected failure" in r.getMessage() for r in caplog.records)


def test_a_receiver_that_never_answers_times_out_each_attempt_and_is_counted() -> None:
    """A receiver that takes the request and never answers: each attempt ends at the request timeout, the
    notice is counted `retries_exhausted` "timed out", and the next notice is not held behind it for
    longer than the tries take."""
    counts = Counts()
    with WebhookReceiver(statuses=[]) as receiver:
        receiver.hold()
        hooks = sender([receiver.url], counts, tries=2, timeout=0.2)
        hooks.submit({"type": "event_started"})
        wait_for(lambda: counts.failed, what="the timed-out notice counted")
        assert hooks.status()[0]["last_error"] == "timed out after 2 attempt(s)"
        receiver.release()
        hooks.submit({"type": "drain_started"})
        wait_for(lambda: counts.sent, what="the next notice delivered")
        hooks.close(1.0)
    assert counts.failed == [FailureReason.RETRIES_EXHAUSTED]
    assert hooks.status()[0]["last_error"] is None  # the delivery after it cleared the error
    assert receiver.types().count("drain_started") == 1  # the held attempts are answered too, once released
