"""Webhooks: each notice is a JSON POST to every configured URL, from a thread of its own per URL.

Never in a signal's way: the loop only calls `submit` (an append to a bounded queue under a
lock held for nothing else); connecting, sending, retrying and backing off happen on the webhook's thread.
When a queue is full (its receiver has been failing through many events), the OLDEST notice is dropped and
counted as a failure (`queue_full`): the newest says what is true now (a drain finished, an event cleared),
and what was dropped is in the log.

Retries: connection errors, timeouts, 429 and 5xx are tried again, up to `tries` attempts with doubling
backoff; another 4xx is the receiver refusing the body (`rejected`), not retried. Every attempt has its
own timeout. Proxies come from the environment (HTTPS_PROXY, NO_PROXY), as for any HTTP client.

What the webhook's thread tells of itself (its counters, its log lines) runs inside `guarded`, the daemon's
output guard: a counter or a log line that fails is counted as that output's error, never taken for the
notice's own failure, and never ends the thread.

A webhook URL is a secret (whoever has it can post): logs and /status name a webhook by its number and its
redacted URL only, and errors are said in words (requests' exception texts quote the URL).
"""

from __future__ import annotations

import collections
import contextlib
import enum
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import requests

from watchdog import __version__
from watchdog.core.redaction import redacted_url
from watchdog.core.text import valid_text
from watchdog.core.vocabulary import Output

log = logging.getLogger("tpu-watchdog")

TRIES = 4  # attempts per notice and URL: a Slack timeout must not lose the notice
BACKOFF = 1.0  # s before the second attempt; doubled for each further one (1, 2, 4 s)
REQUEST_TIMEOUT = 5.0  # s to connect, and again to read the answer, per attempt
QUEUE_SIZE = 50  # notices waiting per URL (an event makes four)

Notice = Mapping[str, Any]
Guarded = Callable[[Output], AbstractContextManager[object]]  # `Outputs.guarded`: swallows and counts


def _suppressed(_output: Output) -> AbstractContextManager[object]:
    """The guard of a sender built outside the daemon (a test, a command): a failure is dropped."""
    return contextlib.suppress(Exception)


# urllib3's own loggers write the request line, URL path and query included, at DEBUG: never from a
# webhook's thread, at any level (the metadata transport's lines are kept).
_URLLIB3_LOGGERS = tuple(
    f"urllib3.{name}" for name in ("connectionpool", "connection", "poolmanager", "util.retry", "response")
)
_THREAD_PREFIX = "webhook-"


def _not_from_a_webhook(record: logging.LogRecord) -> bool:
    return not (record.threadName or "").startswith(_THREAD_PREFIX)


class FailureReason(str, enum.Enum):
    """Why a notice never reached a webhook (the `reason` label of tpu_watchdog_webhook_failures_total)."""

    RETRIES_EXHAUSTED = "retries_exhausted"  # every attempt met a connection error, timeout, 429 or 5xx
    REJECTED = "rejected"  # a 4xx other than 429: the receiver refuses it; trying again would not help
    QUEUE_FULL = "queue_full"  # dropped, the oldest first, while the receiver was failing
    STOPPED = "stopped"  # still queued at `close`: the daemon stopped, or a reload replaced the webhooks


class _Target:
    """One webhook URL: its queue, its thread and what /status shows of it."""

    def __init__(self, number: int, url: str) -> None:
        self.number, self.url, self.shown = number, url, redacted_url(url)
        self.queue: collections.deque[Notice] = collections.deque()
        self.wake = threading.Condition()
        self.busy = False  # a notice is being sent
        self.sent = 0
        self.failed = 0
        self.last_error: str | None = None
        self.thread: threading.Thread | None = None

    @property
    def name(self) -> str:
        return f"webhook {self.number} ({self.shown})"


class WebhookSender:
    """Sends notices to every URL in `urls`; `on_sent()` and `on_failed(reason)` count them, and what the
    sender tells of itself runs in `guarded(output)`."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        on_sent: Callable[[], None] = lambda: None,
        on_failed: Callable[[FailureReason], None] = lambda _reason: None,
        tries: int = TRIES,
        backoff: float = BACKOFF,
        timeout: float = REQUEST_TIMEOUT,
        queue_size: int = QUEUE_SIZE,
        guarded: Guarded = _suppressed,
    ) -> None:
        if tries < 1 or queue_size < 1:
            raise ValueError("tries and queue_size must be at least 1")
        self.targets = [_Target(n, url) for n, url in enumerate(urls, start=1)]
        self.on_sent, self.on_failed, self.guarded = on_sent, on_failed, guarded
        self.tries, self.backoff, self.timeout, self.queue_size = tries, backoff, timeout, queue_size
        self._closing = threading.Event()
        for name in _URLLIB3_LOGGERS:
            logging.getLogger(name).addFilter(_not_from_a_webhook)  # the same function is added once

    def submit(self, notice: Notice) -> None:
        """Queue `notice` for every webhook and return at once (any thread; it never waits on the network)."""
        for target in self.targets:
            dropped: Notice | None = None
            with target.wake:
                if self._closing.is_set():
                    return
                if len(target.queue) >= self.queue_size:
                    dropped = target.queue.popleft()
                target.queue.append(notice)
                if target.thread is None:
                    target.thread = threading.Thread(
                        target=self._serve,
                        args=(target,),
                        name=f"{_THREAD_PREFIX}{target.number}",
                        daemon=True,
                    )
                    target.thread.start()
                target.wake.notify()
            if dropped is not None:
                self._failed(
                    target, FailureReason.QUEUE_FULL, f"queue full ({self.queue_size}): dropped", dropped
                )

    def close(self, timeout: float, why: str = "the daemon stopped before it was sent") -> bool:
        """Give queued notices up to `timeout` s to go out, then stop; True if none was left behind. A notice
        left behind is counted `stopped` and logged with `why`."""
        give_up = time.monotonic() + timeout
        try:
            for target in self.targets:
                with target.wake:  # each delivery's end notifies it: woken then, never polled
                    while (target.queue or target.busy) and target.thread:
                        left = give_up - time.monotonic()
                        if left <= 0:
                            break
                        target.wake.wait(left)
        finally:
            self._closing.set()
        left_behind = False
        for target in self.targets:
            with target.wake:
                unsent = list(target.queue)
                target.queue.clear()
                left_behind = left_behind or bool(unsent) or target.busy
                target.wake.notify_all()
            for notice in unsent:
                self._failed(target, FailureReason.STOPPED, why, notice)
        return not left_behind

    def status(self) -> list[dict[str, object]]:
        """What /status shows: per webhook its redacted URL and counts; never the URL itself."""
        return [
            {"webhook": t.shown, "sent": t.sent, "failed": t.failed, "queued": len(t.queue),
             "last_error": t.last_error}
            for t in self.targets
        ]  # fmt: skip

    # -- the webhook's own thread -------------------------------------------------------------------------

    def _serve(self, target: _Target) -> None:
        with requests.Session() as session:
            session.headers["User-Agent"] = f"tpu-watchdog/{__version__}"
            while True:
                with target.wake:
                    while not target.queue and not self._closing.is_set():
                        target.wake.wait()
                    if self._closing.is_set():
                        return
                    notice = target.queue.popleft()
                    target.busy = True
                try:
                    self._deliver(session, target, notice)
                except Exception:  # a webhook must never take the daemon down: logged whole, never raised
                    with self.guarded(Output.LOG):  # the log may be what failed: the thread goes on
                        log.exception("%s: unexpected failure; the notice is lost", target.name)
                finally:
                    with target.wake:
                        target.busy = False
                        target.wake.notify_all()

    def _deliver(self, session: requests.Session, target: _Target, notice: Notice) -> None:
        # A process name that is not UTF-8 goes as its JSON escape (core.text), not as a notice lost.
        body = valid_text(json.dumps(notice, ensure_ascii=False, default=str)).encode()
        headers = {"Content-Type": "application/json; charset=utf-8"}
        delay = self.backoff
        for attempt in range(1, self.tries + 1):
            try:
                with session.post(
                    target.url, data=body, headers=headers, timeout=(self.timeout, self.timeout),
                    allow_redirects=False, stream=True,
                ) as response:  # fmt: skip
                    status = response.status_code
            except requests.RequestException as error:
                why = _in_words(error)
            else:
                if 200 <= status < 300:
                    target.sent += 1
                    target.last_error = None
                    with self.guarded(Output.METRICS):
                        self.on_sent()
                    if attempt > 1:
                        with self.guarded(Output.LOG):
                            kind = notice.get("type")
                            log.info("%s: %s delivered at attempt %d", target.name, kind, attempt)
                    return
                why = f"HTTP {status}"
                if 300 <= status < 500 and status != 429:
                    self._failed(target, FailureReason.REJECTED, f"{why}: refused, not retried", notice)
                    return
            if attempt == self.tries:
                break
            with self.guarded(Output.LOG):
                log.debug(
                    "%s: %s at attempt %d of %d; again in %g s", target.name, why, attempt, self.tries, delay
                )
            if self._closing.wait(delay):
                break
            delay *= 2
        self._failed(target, FailureReason.RETRIES_EXHAUSTED, f"{why} after {attempt} attempt(s)", notice)

    def _failed(self, target: _Target, reason: FailureReason, why: str, notice: Notice) -> None:
        with target.wake:  # a queue_full comes from the submitting thread, the rest from the webhook's
            target.failed += 1
            target.last_error = why
        with self.guarded(Output.METRICS):
            self.on_failed(reason)
        with self.guarded(Output.LOG):
            log.error("%s: %s notice not delivered: %s", target.name, notice.get("type", "a"), why)


def _in_words(error: BaseException) -> str:
    """What went wrong, without the exception's text (requests quotes the URL in it)."""
    if isinstance(error, requests.Timeout):
        return "timed out"
    chain: list[BaseException] = []
    todo: list[BaseException] = [error]
    while todo and len(chain) < 16:
        current = todo.pop()
        chain.append(current)
        todo += [
            e for e in (current.__cause__, current.__context__, *current.args) if isinstance(e, BaseException)
        ]
    for kinds, words in _WORDS:
        if any(isinstance(e, kinds) for e in chain):
            return words
    return "could not connect" if isinstance(error, requests.ConnectionError) else type(error).__name__


_WORDS: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], str], ...] = (
    (ConnectionRefusedError, "connection refused"),
    (socket.gaierror, "host name not resolved"),
    ((ssl.SSLError, requests.exceptions.SSLError), "TLS handshake failed"),
    ((ConnectionResetError, ConnectionAbortedError, BrokenPipeError), "connection reset"),
    ((TimeoutError, socket.timeout), "timed out"),
)
