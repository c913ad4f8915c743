"""The watches against the fake over real HTTP: changes, ETags, timeouts, every failure, stop, fallbacks."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from tests.support.failing_logs import every_line_raising
from tests.support.waiting import wait_for
from watchdog.core.metadata_values import MaintenanceKind, Preempted, UpcomingMaintenance, WatchedValue
from watchdog.core.stop import Stop
from watchdog.fake.server import FakeMetadataServer, Fault
from watchdog.metadata.backoff import WatchBackoff
from watchdog.metadata.errors import ErrorKind
from watchdog.metadata.keys import MAINTENANCE_EVENT, PREEMPTED, UPCOMING_MAINTENANCE, KeySpec
from watchdog.metadata.transport import MetadataTransport
from watchdog.metadata.watch import (
    KeyUnsupported,
    KeyWatch,
    MetadataWatcher,
    ValueChanged,
    WatchEvent,
    WatchFailed,
    WatchMode,
    WatchTiming,
    staggered,
)

FAST = WatchTiming(
    read_margin_sec=2.0,
    request_timeout_sec=0.5,
    spin_guard_sec=0.05,
    early_returns_before_polling=3,
    poll_interval_sec=0.2,
    unsupported_recheck_sec=0.2,
)
NOTICE = {
    "type": "SCHEDULED",
    "maintenance_status": "PENDING",
    "window_start_time": "2026-12-06T10:00:00Z",
    "window_end_time": "2026-12-06T14:00:00Z",
    "can_reschedule": "true",
}


class Recorder:
    """The emit callback: keeps every event, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[WatchEvent] = []

    def __call__(self, event: WatchEvent) -> None:
        with self._lock:
            self._events.append(event)

    def events(self) -> list[WatchEvent]:
        with self._lock:
            return list(self._events)

    def values(self) -> list[WatchedValue]:
        return [e.value for e in self.events() if isinstance(e, ValueChanged)]

    def failures(self) -> list[ErrorKind]:
        return [e.error.kind for e in self.events() if isinstance(e, WatchFailed)]


def fast_backoff() -> WatchBackoff:
    return WatchBackoff.uniform(initial=0.02, cap=0.1)


StartWatch = Callable[..., KeyWatch]


@pytest.fixture
def stop() -> Iterator[Stop]:
    event = Stop()
    yield event
    event.set()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def start_watch(
    fake: FakeMetadataServer, transport: MetadataTransport, stop: Stop, recorder: Recorder
) -> Iterator[StartWatch]:
    watches: list[KeyWatch] = []

    def start(key: str, client: MetadataTransport | None = None, **kwargs: object) -> KeyWatch:
        options: dict[str, object] = {"timing": FAST, "backoff": fast_backoff(), **kwargs}
        watch = KeyWatch(key, client or transport, recorder, stop, None, 1, **options)  # type: ignore[arg-type]
        watch.start()
        watches.append(watch)
        return watch

    yield start
    stop.set()
    for watch in watches:
        assert watch.join(5), f"{watch.key} did not stop"


def _values_of(recorder: Recorder) -> list[str]:
    return [getattr(v, "raw", repr(v)) for v in recorder.values()]


def test_first_value_then_each_change(
    fake: FakeMetadataServer, recorder: Recorder, start_watch: StartWatch
) -> None:
    watch = start_watch(MAINTENANCE_EVENT)
    wait_for(lambda: _values_of(recorder) == ["NONE"], what="the first value")
    fake.set(MAINTENANCE_EVENT, "TERMINATE_ON_HOST_MAINTENANCE")
    wait_for(lambda: len(recorder.values()) == 2, what="the change")
    fake.set(MAINTENANCE_EVENT, "NONE")
    wait_for(lambda: len(recorder.values()) == 3, what="the change back")
    assert _values_of(recorder) == ["NONE", "TERMINATE_ON_HOST_MAINTENANCE", "NONE"]
    assert recorder.values()[1].kind is MaintenanceKind.TERMINATE_ON_HOST_MAINTENANCE  # type: ignore[union-attr]
    status = watch.status()
    assert status.changes == 3
    assert status.mode is WatchMode.HANGING
    assert status.last_success is not None
    assert status.last_error is None


def test_etag_is_carried_forward(
    fake: FakeMetadataServer, recorder: Recorder, start_watch: StartWatch
) -> None:
    start_watch(PREEMPTED)
    wait_for(lambda: recorder.values() == [Preempted(False)], what="the first value")
    first = fake.lookup(PREEMPTED)
    assert first is not None
    wait_for(lambda: fake.store.waiting() == 1, what="a hanging GET")
    fake.set(PREEMPTED, "TRUE")
    wait_for(lambda: recorder.values() == [Preempted(False), Preempted(True)], what="the change")
    second = fake.lookup(PREEMPTED)
    assert second is not None
    wait_for(lambda: fake.store.waiting() == 1, what="the next hanging GET")
    stop_queries = [r.query for r in fake.requests() if r.path == PREEMPTED]
    assert "wait_for_change" not in stop_queries[0]  # a plain read first
    assert f"last_etag={first.etag}" in stop_queries[1]
    assert "timeout_sec=1" in stop_queries[1]
    fake.set(PREEMPTED, "FALSE")  # answers the hang so the log shows its query
    wait_for(lambda: len(recorder.values()) == 3, what="the third value")
    assert any(f"last_etag={second.etag}" in r.query for r in fake.requests())


def test_timeout_returns_are_not_changes(
    fake: FakeMetadataServer, recorder: Recorder, start_watch: StartWatch
) -> None:
    watch = start_watch(MAINTENANCE_EVENT)
    wait_for(lambda: sum(r.note == "timeout" for r in fake.requests()) >= 2, timeout=10, what="two timeouts")
    assert _values_of(recorder) == ["NONE"]
    assert recorder.failures() == []
    assert watch.status().requests >= 3


@pytest.mark.parametrize(
    ("fault", "kind"),
    [
        (Fault(kind="status", status=503, count=2), ErrorKind.HTTP_5XX),
        (Fault(kind="status", status=429, count=2), ErrorKind.HTTP_429),
        (Fault(kind="status", status=403, count=2), ErrorKind.HTTP_403),
        (Fault(kind="status", status=404, count=2), ErrorKind.HTTP_404),
        (Fault(kind="status", status=400, count=2), ErrorKind.HTTP_4XX),
        (Fault(kind="reset", count=2), ErrorKind.CONNECTION_RESET),
        (Fault(kind="garbage", count=2), ErrorKind.BODY_NOT_TEXT),
        (Fault(kind="oversized", count=2), ErrorKind.BODY_TOO_LARGE),
        (Fault(kind="no_flavor", count=2), ErrorKind.MISSING_FLAVOR),
        (Fault(kind="delay", seconds=5.0, count=2), ErrorKind.TIMEOUT),
    ],
)
def test_each_failure_is_classified_retried_and_never_a_value(
    fake: FakeMetadataServer, recorder: Recorder, start_watch: StartWatch, fault: Fault, kind: ErrorKind
) -> None:
    fake.add_fault(fault)
    watch = start_watch(MAINTENANCE_EVENT)
    wait_for(lambda: recorder.values(), what="the value after the failures")
    assert recorder.failures() == [kind, kind]
    assert isinstance(recorder.events()[-1], ValueChanged)
    assert _values_of(recorder) == ["NONE"]
    status = watch.status()
    assert status.error_counts == {kind: 2}
    assert status.last_error is None  # cleared by the success
    fake.set(MAINTENANCE_EVENT, "TERMINATE_ON_HOST_MAINTENANCE")
    wait_for(lambda: len(recorder.values()) == 2, what="a change after recovery")


def test_malformed_value_is_an_error_and_the_last_good_value_stays(
    fake: FakeMetadataServer, recorder: Recorder, start_watch: StartWatch
) -> None:
    watch = start_watch(MAINTENANCE_EVENT)
    wait_for(lambda: recorder.values(), what="the first value")
    fake.set(MAINTENANCE_EVENT, "TERMINATE_ON_HOST_MAINTENANCE\x00junk")
    wait_for(lambda: recorder.failures() == [ErrorKind.MALFORMED_VALUE], what="the malformed value")
    assert _values_of(recorder) == ["NONE"]
    assert watch.status().value == recorder.values()[0]
    fake.set(MAINTENANCE_EVENT, "MIGRATE_ON_HOST_MAINTENANCE")
    wait_for(lambda: len(recorder.values()) == 2, what="the next good value")
    assert _values_of(recorder) == ["NONE", "MIGRATE_ON_HOST_MAINTENANCE"]


def test_connection_refused_is_retried(
    free_port: int, recorder: Recorder, start_watch: StartWatch, stop: Stop
) -> None:
    with MetadataTransport(f"127.0.0.1:{free_port}") as nowhere:
        watch = start_watch(PREEMPTED, nowhere)
        wait_for(lambda: len(recorder.failures()) >= 3, what="repeated failures")
        assert set(recorder.failures()) == {ErrorKind.CONNECTION_REFUSED}
        assert recorder.values() == []
        assert watch.status().requests >= 3
        stop.set()
        assert watch.join(2)


def test_recovers_when_the_server_comes_back(recorder: Recorder, stop: Stop, start_watch: StartWatch) -> None:
    first = FakeMetadataServer(listen="127.0.0.1:0").start()
    address = first.address
    with MetadataTransport(address) as client:
        start_watch(MAINTENANCE_EVENT, client)
        wait_for(lambda: recorder.values(), what="the first value")
        first.stop()
        wait_for(lambda: len(recorder.failures()) >= 2, what="failures while the server is down")
        with FakeMetadataServer(listen=address) as second:
            second.set(MAINTENANCE_EVENT, "TERMINATE_ON_HOST_MAINTENANCE")
            wait_for(lambda: len(recorder.values()) == 2, what="the value from the restarted server")
            assert _values_of(recorder) == ["NONE", "TERMINATE_ON_HOST_MAINTENANCE"]
            stop.set()


def test_stop_ends_a_watch_mid_hang_within_a_second(
    fake: FakeMetadataServer, recorder: Recorder, stop: Stop
) -> None:
    with MetadataTransport(fake.address) as client:
        watch = KeyWatch(MAINTENANCE_EVENT, client, recorder, stop, None, 30, timing=FAST)
        watch.start()
        wait_for(lambda: fake.store.waiting() == 1, what="a 30 s hanging GET")
        started = time.monotonic()
        stop.set()
        assert watch.join(1.0)
        assert time.monotonic() - started < 1.0
        assert watch.status().mode is WatchMode.STOPPED
        assert recorder.failures() == []  # shutting down is not a failure


def test_upcoming_maintenance_404_is_unsupported_once_and_asked_again_until_it_answers(
    fake: FakeMetadataServer, recorder: Recorder, start_watch: StartWatch
) -> None:
    fake.delete(UPCOMING_MAINTENANCE)
    watch = start_watch(UPCOMING_MAINTENANCE)
    asked = lambda: [r for r in fake.requests() if r.path == UPCOMING_MAINTENANCE]  # noqa: E731
    wait_for(lambda: len(asked()) >= 3, what="the 404 key asked again")
    failed, event = recorder.events()  # said once, not on every recheck; the first 404 counts as an error
    assert isinstance(failed, WatchFailed)
    assert failed.error.kind is ErrorKind.HTTP_404
    assert isinstance(event, KeyUnsupported)
    assert event.key == UPCOMING_MAINTENANCE
    assert watch.status().mode is WatchMode.UNSUPPORTED
    assert all(r.status == 404 and "wait_for_change" not in r.query for r in asked())  # plain GETs
    fake.set(UPCOMING_MAINTENANCE, NOTICE)  # a passing 404 (a hiccup) does not blind the watch for good
    wait_for(lambda: len(recorder.values()) == 1, what="the notice after the 404s")
    wait_for(lambda: watch.status().mode is WatchMode.HANGING, what="watched again")


def test_a_404_is_one_warning_that_says_whether_the_key_answered_before(
    fake: FakeMetadataServer, recorder: Recorder, start_watch: StartWatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake.set(UPCOMING_MAINTENANCE, NOTICE)
    start_watch(UPCOMING_MAINTENANCE)
    wait_for(lambda: len(recorder.values()) == 1, what="the notice")
    fake.delete(UPCOMING_MAINTENANCE)
    asked = lambda: [r for r in fake.requests() if r.path == UPCOMING_MAINTENANCE and r.status == 404]  # noqa: E731
    wait_for(lambda: len(asked()) >= 3, what="the 404 key asked again")
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warned == [
        f"metadata {UPCOMING_MAINTENANCE}: HTTP 404 after answering before; asking again every 0.2 s"
    ]


def test_upcoming_maintenance_503_nothing_scheduled_then_a_notice(
    fake: FakeMetadataServer, recorder: Recorder, start_watch: StartWatch
) -> None:
    start_watch(UPCOMING_MAINTENANCE)
    wait_for(lambda: recorder.values() == [UpcomingMaintenance(None)], what="nothing scheduled (503)")
    fake.set(UPCOMING_MAINTENANCE, NOTICE)
    wait_for(lambda: len(recorder.values()) == 2, what="the notice")
    notice = recorder.values()[1].notice  # type: ignore[union-attr]
    assert notice is not None
    assert (notice.type, notice.status, notice.can_reschedule) == ("SCHEDULED", "PENDING", True)
    assert all("alt=json" in r.query for r in fake.requests() if r.path == UPCOMING_MAINTENANCE)
    fake.set(UPCOMING_MAINTENANCE, {})
    wait_for(lambda: recorder.values()[-1] == UpcomingMaintenance(None), what="nothing scheduled again")
    assert recorder.failures() == []


def test_upcoming_maintenance_falls_back_to_polling_on_400(
    fake: FakeMetadataServer, recorder: Recorder, start_watch: StartWatch
) -> None:
    watch = start_watch(UPCOMING_MAINTENANCE)
    wait_for(lambda: recorder.values(), what="the first value")
    fake.add_fault(Fault(kind="status", status=400, path=UPCOMING_MAINTENANCE))
    fake.expire_hanging()
    wait_for(lambda: watch.status().mode is WatchMode.POLLING, what="polling")
    fake.set(UPCOMING_MAINTENANCE, NOTICE)
    wait_for(lambda: len(recorder.values()) == 2, what="the notice, by polling")
    after_fallback = [r for r in fake.requests() if r.status == 200]
    assert all("wait_for_change" not in r.query for r in after_fallback)


def test_upcoming_maintenance_falls_back_when_hangs_return_at_once(
    fake: FakeMetadataServer, recorder: Recorder, start_watch: StartWatch
) -> None:
    watch = start_watch(UPCOMING_MAINTENANCE)
    wait_for(lambda: recorder.values(), what="the first value")
    bodies = [{}, {"error": "no notifications have been received yet, try again later"}]
    for flip in range(3):  # each answer has a new ETag but the same value: a hang that returned at once
        wait_for(lambda: fake.store.waiting() == 1, what=f"hang {flip}")
        answered = len(fake.requests())
        fake.set(UPCOMING_MAINTENANCE, bodies[flip % 2])
        wait_for(lambda: len(fake.requests()) > answered, what=f"hang {flip} to return")  # noqa: B023
    wait_for(lambda: watch.status().mode is WatchMode.POLLING, what="polling")
    assert recorder.values() == [UpcomingMaintenance(None)]


def test_unexpected_exceptions_and_a_failing_consumer_do_not_end_the_watch(
    fake: FakeMetadataServer, transport: MetadataTransport, stop: Stop
) -> None:
    seen: list[WatchEvent] = []

    def fragile(event: WatchEvent) -> None:
        seen.append(event)
        raise RuntimeError("consumer bug")

    calls = iter([RuntimeError("parser bug")])

    def parse(body: str) -> WatchedValue:
        failure = next(calls, None)
        if failure is not None:
            raise failure
        return Preempted(body == "TRUE")

    spec = KeySpec(PREEMPTED, parse)
    watch = KeyWatch(
        PREEMPTED, transport, fragile, stop, None, 1, timing=FAST, backoff=fast_backoff(), spec=spec
    )
    watch.start()
    wait_for(lambda: any(isinstance(e, ValueChanged) for e in seen), what="a value after the failures")
    assert isinstance(seen[0], WatchFailed)
    assert seen[0].error.kind is ErrorKind.OTHER
    assert "parser bug" in seen[0].error.detail
    fake.set(PREEMPTED, "TRUE")
    wait_for(lambda: sum(isinstance(e, ValueChanged) for e in seen) == 2, what="the watch goes on")
    stop.set()
    assert watch.join(2)


def test_watcher_runs_the_three_watches_and_stops_them(
    fake: FakeMetadataServer, transport: MetadataTransport, recorder: Recorder, stop: Stop
) -> None:
    watcher = MetadataWatcher(
        transport, recorder, stop, timeout_sec=1, timing=FAST, backoff_factory=fast_backoff
    )
    before = set(threading.enumerate())
    watcher.start()
    started_threads = sorted(t.name for t in set(threading.enumerate()) - before)
    # A watch each, and no thread waiting for the stop: setting it ends their hanging GETs (`Stop.on_set`).
    assert [n for n in started_threads if n.startswith(("watch ", "stop "))] == [
        f"watch {MAINTENANCE_EVENT}",
        f"watch {PREEMPTED}",
        f"watch {UPCOMING_MAINTENANCE}",
    ]
    wait_for(lambda: len(recorder.values()) == 3, what="a first value per key")
    assert {e.key for e in recorder.events()} == {MAINTENANCE_EVENT, PREEMPTED, UPCOMING_MAINTENANCE}
    fake.set(PREEMPTED, "TRUE")
    wait_for(lambda: Preempted(True) in recorder.values(), what="preemption")
    assert [s.key for s in watcher.statuses()] == [MAINTENANCE_EVENT, PREEMPTED, UPCOMING_MAINTENANCE]
    wait_for(lambda: fake.store.waiting() == 3, what="three hanging GETs")
    started = time.monotonic()
    stop.set()
    assert watcher.join(1.0)
    assert time.monotonic() - started < 1.0
    assert all(s.mode is WatchMode.STOPPED for s in watcher.statuses())


# Long enough for the curve every failure once rode (1, 2, 4, 8, 16 s, jittered by 20 %, then 30 s): its
# 16 s wait starts between 12 and 18 s into the outage, so at 20 s it has 4.8 s or more to go; with the
# no-answer curve the wait is 1 s at most.
OUTAGE_SEC = 20.0
RETURN_HEARD_SEC = 2.0  # the promise: a changed value is delivered this soon after the server is back


def test_a_value_changed_during_a_long_outage_is_delivered_within_2_s_of_the_return(
    stop: Stop, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    # The production timings and backoff: the fake stopped (connections refused) for longer than the old
    # backoff's cap, then back on the same port with preempted=TRUE, as on a Spot VM with 30 s of notice.
    caplog.set_level(logging.INFO, logger="watchdog.metadata.watch")
    first = FakeMetadataServer(listen="127.0.0.1:0").start()
    address = first.address
    with MetadataTransport(address) as transport:
        watcher = MetadataWatcher(transport, recorder, stop)
        watcher.start()
        wait_for(lambda: first.store.waiting() == 3, what="three hanging GETs")
        first.stop()
        stopped = time.monotonic()
        stop.wait(OUTAGE_SEC)  # the outage itself: what the test is about, not a synchronisation
        refused = [s.error_counts.get(ErrorKind.CONNECTION_REFUSED, 0) for s in watcher.statuses()]
        back = FakeMetadataServer(listen=address)
        back.set(PREEMPTED, "TRUE")
        returned = time.time()  # before it listens: the delay measured is, if anything, too long
        with back:
            wait_for(lambda: Preempted(True) in recorder.values(), timeout=10, what="preempted=TRUE")
            [delivered] = [
                e for e in recorder.events() if isinstance(e, ValueChanged) and e.value == Preempted(True)
            ]
            answered = [r for r in back.requests() if r.path == PREEMPTED and r.status == 200]
            stop.set()
            assert watcher.join(5)
    outage = time.monotonic() - stopped
    assert answered, "the value came from the server that returned"
    assert delivered.at - returned <= RETURN_HEARD_SEC, f"{delivered.at - returned:.2f} s after the return"
    # Bounded while it lasted: no-answer retries 0.25, 0.5, then 1 s apart (jittered down to 0.8 s).
    assert all(OUTAGE_SEC / 1.25 <= n <= OUTAGE_SEC / 0.8 + 3 for n in refused), refused
    [line] = [r.getMessage() for r in caplog.records if "answering again" in r.getMessage()]
    seconds = float(line.removeprefix("metadata server answering again after ").removesuffix(" s"))
    assert OUTAGE_SEC - 1 <= seconds <= outage


def test_a_log_that_raises_on_every_line_never_ends_a_watch(
    fake: FakeMetadataServer, recorder: Recorder, start_watch: StartWatch
) -> None:
    """The line of a value is said before it is emitted, the outage's end before the value it brings: a
    raising line once ended the watch there, the value lost for good (it was already the last seen)."""
    told: list[Exception] = []
    fake.add_fault(Fault(kind="reset", count=1))  # no answer, then "answering again"
    with every_line_raising("watchdog.metadata.watch") as lines:
        watch = start_watch(MAINTENANCE_EVENT, on_output_error=told.append)
        wait_for(lambda: recorder.values(), what="the first value, after the reset")
        assert lines.refused("answering again")
        fake.set(MAINTENANCE_EVENT, "TERMINATE_ON_HOST_MAINTENANCE")
        wait_for(lambda: len(recorder.values()) == 2, what="the change, its line refused")
    assert recorder.failures() == [ErrorKind.CONNECTION_RESET]
    assert watch.alive
    assert len(told) == len(lines.refused()) >= 4  # the reset, the return, two values: each told
    assert all(isinstance(error, RuntimeError) for error in told)


def test_the_keys_hanging_gets_ask_timeouts_apart(
    transport: MetadataTransport, recorder: Recorder, stop: Stop
) -> None:
    """Asked with one timeout, the three answers came at one instant every minute, and their threads woke
    together and handed the GIL around (docs/benchmarks.md, idle footprint). A short test timeout stays."""
    watcher = MetadataWatcher(transport, recorder, stop, timeout_sec=60)
    assert [w._timeout_sec for w in watcher.watches] == [60, 58, 56]  # what each GET asks
    assert [staggered(2, i) for i in range(3)] == [2, 2, 2]
    assert staggered(1, 40) == 1  # never 0: that would be a plain GET answered at once, in a loop
