"""One hanging-GET watch per metadata key, pushing plain event records to an injected `emit`.

Each watch reads the value and its ETag, emits it (the first value is a change from "unknown"), then hangs
with `wait_for_change=true&last_etag=E&timeout_sec=T` and a client read timeout a margin longer than T
(the guest agent's 60/70). It emits only when the parsed value changed: the server also returns on timeout.
A failure is classified, emitted as `WatchFailed`, backed off (backoff.py: within about 1 s when the server
did not answer at all) and retried, and is never a value change; after one, a plain GET resynchronises
before hanging again. The server's return after an outage is logged once (`Outage`), not once per key.
Every log line of a watch goes through `KeyWatch._say`: a line that raises (a broken journal) is handed to
the injected `on_output_error` (the daemon counts it) and ends nothing, since a dead watch is a missed event.
Setting `stop` closes the transport, which shuts down the sockets of hanging GETs, so every watch ends at
once (one stop per transport).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeAlias

from watchdog.core.clock import Clock, SystemClock
from watchdog.core.metadata_values import (
    MaintenanceEvent,
    MaintenanceKind,
    MalformedValue,
    UpcomingMaintenance,
    WatchedValue,
)
from watchdog.core.stop import Stop
from watchdog.metadata.backoff import WatchBackoff
from watchdog.metadata.errors import NO_ANSWER, ErrorKind, MetadataError
from watchdog.metadata.keys import DEFAULT_KEYS, KEY_SPECS, KeySpec
from watchdog.metadata.transport import MetadataResponse, MetadataTransport

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ValueChanged:
    key: str
    value: WatchedValue
    at: float  # wall seconds


@dataclass(frozen=True)
class WatchFailed:
    key: str
    error: MetadataError
    at: float


@dataclass(frozen=True)
class KeyUnsupported:
    key: str
    at: float


WatchEvent: TypeAlias = ValueChanged | WatchFailed | KeyUnsupported
Emit = Callable[[WatchEvent], None]
OnOutputError = Callable[[Exception], None]  # a log line of a watch raised: told, never raised again


def _ignore(error: Exception) -> None:
    """The default `on_output_error` (a watch without a daemon): the line is lost, the watch goes on."""


class WatchMode(enum.Enum):
    HANGING = "hanging"
    POLLING = "polling"  # hanging GETs misbehaved on this key: a plain GET every poll_interval_sec
    UNSUPPORTED = "unsupported"
    STOPPED = "stopped"


@dataclass(frozen=True)
class WatchTiming:
    """Tuning of a watch; tests shrink these, production keeps the defaults."""

    read_margin_sec: float = 10.0  # client read timeout = timeout_sec + this (guest agent: 60 + 10)
    request_timeout_sec: float = 10.0  # read timeout of a plain (non-hanging) GET
    spin_guard_sec: float = 1.0  # pause after a hanging GET that returned early with no change
    early_returns_before_polling: int = 3  # that many in a row on a may_poll key: switch to polling
    poll_interval_sec: float = 60.0
    # A key that answered 404 is asked again this often: a machine that lacks it pays 2 GETs a minute, and
    # a passing 404 (a metadata server hiccup) cannot blind the watch for good.
    unsupported_recheck_sec: float = 30.0


@dataclass(frozen=True)
class WatchStatus:
    """A snapshot for health checks and metrics."""

    key: str
    mode: WatchMode
    value: WatchedValue | None
    last_success: float | None  # wall seconds of the last good answer
    last_error: ErrorKind | None  # kind of the last failure, None once a request succeeds again
    error_counts: Mapping[ErrorKind, int] = field(default_factory=dict)
    requests: int = 0
    changes: int = 0


class Outage:
    """Since when the server has not answered, shared by the watches of one server, so that its return is
    said in one line, by the first watch to hear it, not once per key. Any answer ends an outage, an HTTP
    error too: the server is there again."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None

    def no_answer(self) -> None:
        with self._lock:
            if self._since is None:
                self._since = self._clock.monotonic()

    def answered(self) -> float | None:
        """The seconds the outage this answer ends lasted, to the one caller that says so; else None."""
        with self._lock:
            since, self._since = self._since, None
        return None if since is None else self._clock.monotonic() - since


class KeyWatch:
    """Watches one key in its own thread until `stop` is set. `closes_transport`: the stop closes the
    transport as it is set, ending the hanging GET at once (False: its owner does, as `MetadataWatcher`
    does once for the watches that share its transport)."""

    def __init__(
        self,
        key: str,
        transport: MetadataTransport,
        emit: Emit,
        stop: Stop,
        clock: Clock | None = None,
        timeout_sec: int = 60,
        *,
        timing: WatchTiming | None = None,
        backoff: WatchBackoff | None = None,
        spec: KeySpec | None = None,
        outage: Outage | None = None,
        on_output_error: OnOutputError = _ignore,
        closes_transport: bool = True,
    ) -> None:
        if timeout_sec < 1:
            raise ValueError(f"timeout_sec must be a whole number of seconds >= 1, got {timeout_sec}")
        self.key = key
        self._spec = spec if spec is not None else KEY_SPECS[key]
        self._transport = transport
        self._emit = emit
        self._stop = stop
        self._clock = clock if clock is not None else SystemClock()
        self._timeout_sec = int(timeout_sec)
        self._timing = timing if timing is not None else WatchTiming()
        self._backoff = backoff if backoff is not None else WatchBackoff()
        self._outage = outage if outage is not None else Outage(self._clock)
        self._on_output_error = on_output_error
        self._lock = threading.Lock()
        self._status = WatchStatus(key, WatchMode.HANGING, None, None, None)
        self._etag: str | None = None
        self._thread = threading.Thread(target=self.run, name=f"watch {key}", daemon=True)
        if closes_transport:
            stop.on_set(transport.close)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> bool:
        """True when the watch has ended (or was never started)."""
        if self._thread.ident is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def status(self) -> WatchStatus:
        with self._lock:
            return self._status

    def _update(self, **changes: Any) -> None:
        with self._lock:
            self._status = replace(self._status, **changes)

    def run(self) -> None:
        """The watch loop (the thread's target); returns when stopped."""
        try:
            self._loop()
        finally:
            if self.status().mode is not WatchMode.UNSUPPORTED:
                self._update(mode=WatchMode.STOPPED)

    def _loop(self) -> None:
        resync = True  # the next request is a plain GET: at start and after any failure
        early_returns = 0
        while not self._stop.is_set():
            mode = self.status().mode
            hanging = not resync and mode is WatchMode.HANGING
            started = self._clock.monotonic()
            try:
                response = self._fetch(hanging)
                self._answered()  # said before the value it brings
                changed = self._accept(response)
            except MetadataError as exc:
                if self._stop.is_set():
                    return
                if exc.kind in NO_ANSWER:
                    self._outage.no_answer()
                else:
                    self._answered()
                if exc.kind is ErrorKind.HTTP_404 and self._spec.unsupported_on_404:
                    self._unsupported()
                    resync = True
                    self._stop.wait(self._timing.unsupported_recheck_sec)
                    continue
                if hanging and exc.status == 400 and self._spec.may_poll:
                    self._fall_back_to_polling(f"a hanging GET got HTTP 400 ({exc.detail})")
                    continue
                self._failed(exc)
                resync = exc.kind is not ErrorKind.MALFORMED_VALUE  # a bad value came with a good ETag
                self._stop.wait(self._backoff.next_delay(exc.kind))
                continue
            except Exception as exc:  # noqa: BLE001 - a watch never dies: log, count, back off, go on
                self._say(logging.ERROR, "%s: unexpected failure in the watch", self.key, exc_info=True)
                self._failed(MetadataError(ErrorKind.OTHER, self.key, f"{type(exc).__name__}: {exc}"))
                resync = True
                self._stop.wait(self._backoff.next_delay(ErrorKind.OTHER))
                continue
            resync = False
            self._backoff.reset()
            if mode is WatchMode.UNSUPPORTED:
                self._say(logging.WARNING, "%s: answers again after a 404: watched again", self.key)
                self._update(mode=WatchMode.HANGING)
            if mode is WatchMode.POLLING:
                self._stop.wait(self._timing.poll_interval_sec)
            elif hanging and not changed and self._clock.monotonic() - started < self._timeout_sec / 2:
                early_returns += 1
                if self._spec.may_poll and early_returns >= self._timing.early_returns_before_polling:
                    self._fall_back_to_polling(f"{early_returns} hanging GETs in a row returned at once")
                else:
                    self._stop.wait(self._timing.spin_guard_sec)
            else:
                early_returns = 0

    def _fetch(self, hanging: bool) -> MetadataResponse:
        self._update(requests=self.status().requests + 1)
        return self._transport.get(
            self._spec.path,
            wait_for_change=hanging,
            last_etag=self._etag if hanging else None,
            timeout_sec=self._timeout_sec if hanging else None,
            alt=self._spec.alt,
            read_timeout=(
                self._timeout_sec + self._timing.read_margin_sec
                if hanging
                else self._timing.request_timeout_sec
            ),
            pass_statuses=(503,) if self._spec.value_on_503 else (),
        )

    def _accept(self, response: MetadataResponse) -> bool:
        """Parse the answer; emit it if the value changed; True if it did. MetadataError if it is bad."""
        try:
            value = self._spec.parse(response.body)
        except MalformedValue as exc:
            if response.status == 503:
                raise MetadataError(ErrorKind.HTTP_5XX, self.key, f"HTTP 503: {exc}", 503) from None
            self._etag = response.etag  # wait for the next change rather than re-reading the bad value
            raise MetadataError(ErrorKind.MALFORMED_VALUE, self.key, str(exc), response.status) from None
        if response.status == 503 and value != UpcomingMaintenance(None):
            raise MetadataError(ErrorKind.HTTP_5XX, self.key, "HTTP 503 with a maintenance notice", 503)
        self._etag = response.etag
        now = self._clock.wall()
        previous = self.status().value
        changed = value != previous
        self._update(
            value=value,
            last_success=now,
            last_error=None,
            changes=self.status().changes + (1 if changed else 0),
        )
        if changed:
            unknown = isinstance(value, MaintenanceEvent) and value.kind is MaintenanceKind.UNKNOWN
            self._say(logging.WARNING if unknown else logging.INFO, "%s: %s", self.key, value.describe())
            self._send(ValueChanged(self.key, value, now))
        return changed

    def _failed(self, error: MetadataError) -> None:
        counts = dict(self.status().error_counts)
        counts[error.kind] = counts.get(error.kind, 0) + 1
        self._update(last_error=error.kind, error_counts=counts)
        # At debug: the daemon logs it in words, once per change of kind.
        self._say(logging.DEBUG, "%s: %s: %s (retrying)", self.key, error.kind.value, error.detail)
        self._send(WatchFailed(self.key, error, self._clock.wall()))

    def _unsupported(self) -> None:
        """Say once that the key is missing (404); the loop keeps asking, every unsupported_recheck_sec."""
        before = self.status()
        if before.mode is WatchMode.UNSUPPORTED:
            return
        self._update(mode=WatchMode.UNSUPPORTED, value=None)  # the last value is no longer announced
        self._etag = None
        answered = before.last_success is not None  # then an event of it stands (daemon/loop.py)
        why = "HTTP 404 after answering before" if answered else "not supported on this machine (HTTP 404)"
        every = self._timing.unsupported_recheck_sec
        self._say(logging.WARNING, "metadata %s: %s; asking again every %g s", self.key, why, every)
        # The first 404 counts as an error (a hiccup shows on the dashboard); the rechecks do not, or a
        # machine that lacks the key would show a steady error rate while healthy.
        self._failed(MetadataError(ErrorKind.HTTP_404, self.key, "HTTP 404: not supported here", 404))
        self._send(KeyUnsupported(self.key, self._clock.wall()))

    def _fall_back_to_polling(self, why: str) -> None:
        self._say(
            logging.WARNING,
            "%s: %s; polling every %g s instead",
            self.key,
            why,
            self._timing.poll_interval_sec,
        )
        self._update(mode=WatchMode.POLLING)

    def _send(self, event: WatchEvent) -> None:
        try:
            self._emit(event)
        except Exception:  # noqa: BLE001 - a broken consumer must not end the watch
            self._say(logging.ERROR, "%s: the event consumer failed on %r", self.key, event, exc_info=True)

    def _answered(self) -> None:
        lasted = self._outage.answered()
        if lasted is not None:
            self._say(logging.INFO, "metadata server answering again after %.1f s", lasted)

    def _say(self, level: int, message: str, *args: object, exc_info: bool = False) -> None:
        """One log line of the watch; one that raises goes to `on_output_error`, never up the watch."""
        try:
            log.log(level, message, *args, exc_info=exc_info)
        except Exception as error:  # noqa: BLE001 - whatever a handler raises, the watch goes on
            with contextlib.suppress(Exception):  # the teller of a failure failed too: nothing is left
                self._on_output_error(error)


KEY_STAGGER = 0.03  # each key's hanging GET asks a timeout 3 % shorter than the key's before it


def staggered(timeout_sec: int, i: int) -> int:
    """The hanging GET's timeout of the `i`-th key (60, 58, 56 s for three). Asked with one timeout, the
    keys' answers would all come at one instant, every minute, and their threads wake together and hand
    the GIL to each other: a context switch each time (docs/benchmarks.md, idle footprint). Apart, each
    answer wakes one thread. A change is answered at once whatever the timeout."""
    return max(1, round(timeout_sec * (1 - KEY_STAGGER * i)))


class MetadataWatcher:
    """The watches of several keys (default: maintenance-event, preempted, upcoming-maintenance)."""

    def __init__(
        self,
        transport: MetadataTransport,
        emit: Emit,
        stop: Stop,
        keys: Iterable[str] = DEFAULT_KEYS,
        clock: Clock | None = None,
        timeout_sec: int = 60,
        *,
        timing: WatchTiming | None = None,
        backoff_factory: Callable[[], WatchBackoff] = WatchBackoff,
        on_output_error: OnOutputError = _ignore,
    ) -> None:
        outage = Outage(clock if clock is not None else SystemClock())
        self.watches = [
            KeyWatch(
                key,
                transport,
                emit,
                stop,
                clock,
                staggered(timeout_sec, i),
                timing=timing,
                backoff=backoff_factory(),
                outage=outage,
                on_output_error=on_output_error,
                closes_transport=False,
            )
            for i, key in enumerate(keys)
        ]
        stop.on_set(transport.close)  # every hanging GET ends as the stop is set: they share the transport

    def start(self) -> None:
        for watch in self.watches:
            watch.start()

    def join(self, timeout: float | None = None) -> bool:
        """True when every watch has ended (within `timeout` s overall)."""
        clock = SystemClock()
        deadline = None if timeout is None else clock.monotonic() + timeout
        for watch in self.watches:
            left = None if deadline is None else max(0.0, deadline - clock.monotonic())
            watch.join(left)
        return not any(w.alive for w in self.watches)

    def statuses(self) -> list[WatchStatus]:
        return [watch.status() for watch in self.watches]
