"""The metadata watcher: how fast a change reaches the callback, and what watching costs when idle.

Latency: a PUT on the fake's HTTP control API -> the watcher's `emit` callback, 200 changes of
instance/maintenance-event, the watch hanging with the production timeout_sec=60.
Idle cost: the three watches with nothing changing; metadata requests per key per minute.
"""

from __future__ import annotations

import http.client
import queue
import statistics
import time

from bench.common import percentile, wait_until
from watchdog.core.stop import Stop
from watchdog.fake.server import FakeMetadataServer
from watchdog.metadata.keys import DEFAULT_KEYS, MAINTENANCE_EVENT
from watchdog.metadata.transport import MetadataTransport
from watchdog.metadata.watch import KeyWatch, MetadataWatcher, ValueChanged, WatchEvent

CHANGES = 200
LATENCY_GOAL_P99_MS = 20.0
IDLE_TIMEOUT_SEC = 5
IDLE_SECONDS = 60.0
VALUES = ("TERMINATE_ON_HOST_MAINTENANCE", "NONE")


def measure_latency() -> list[float]:
    """Milliseconds from sending each PUT to the callback seeing the new value."""
    arrivals: queue.Queue[tuple[float, str]] = queue.Queue()

    def emit(event: WatchEvent) -> None:
        if isinstance(event, ValueChanged):
            arrivals.put((time.perf_counter(), getattr(event.value, "raw", "")))

    stop = Stop()
    latencies: list[float] = []
    with FakeMetadataServer(listen="127.0.0.1:0") as fake, MetadataTransport(fake.address) as transport:
        watch = KeyWatch(MAINTENANCE_EVENT, transport, emit, stop, None, 60)
        watch.start()
        arrivals.get(timeout=10)  # the first value
        host, port = fake.address.rsplit(":", 1)
        control = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            for i in range(CHANGES):
                wait_until(lambda: fake.store.waiting() == 1)  # the watch is hanging again
                value = VALUES[i % 2]
                sent = time.perf_counter()
                control.request("PUT", f"/_fake/v1/{MAINTENANCE_EVENT}", body=value.encode())
                response = control.getresponse()
                response.read()
                assert response.status == 200, response.status
                seen, raw = arrivals.get(timeout=10)
                assert raw == value, (raw, value)
                latencies.append((seen - sent) * 1000.0)
        finally:
            control.close()
            stop.set()
            watch.join(5)
    return latencies


def measure_idle() -> dict[str, float]:
    """Requests per key per minute while nothing changes, with timeout_sec=IDLE_TIMEOUT_SEC."""
    stop = Stop()
    with FakeMetadataServer(listen="127.0.0.1:0") as fake, MetadataTransport(fake.address) as transport:
        watcher = MetadataWatcher(transport, lambda _: None, stop, timeout_sec=IDLE_TIMEOUT_SEC)
        watcher.start()
        wait_until(lambda: fake.store.waiting() == len(DEFAULT_KEYS))
        before = {status.key: status.requests for status in watcher.statuses()}
        stop.wait(IDLE_SECONDS)
        after = {status.key: status.requests for status in watcher.statuses()}
        stop.set()
        watcher.join(5)
    return {key: (after[key] - before[key]) * 60.0 / IDLE_SECONDS for key in DEFAULT_KEYS}


def run() -> str:
    latencies = measure_latency()
    p50, p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
    idle = measure_idle()
    idle_goal = 60.0 / IDLE_TIMEOUT_SEC + 1
    worst_idle = max(idle.values())
    rows = "\n".join(f"| {key} | {rate:.1f} |" for key, rate in idle.items())
    return f"""## Metadata watcher (`bench_watch`)

Change-to-callback latency: PUT on the fake's control API over HTTP → `emit` callback, {len(latencies)}
changes of instance/maintenance-event, hanging GETs with timeout_sec=60.

| p50 | p99 | max | mean | goal |
| --- | --- | --- | --- | --- |
| {p50:.2f} ms | {p99:.2f} ms | {max(latencies):.2f} ms | {statistics.fmean(latencies):.2f} ms | p99 <= \
{LATENCY_GOAL_P99_MS:.0f} ms: **{"met" if p99 <= LATENCY_GOAL_P99_MS else "NOT met"}** |

Idle cost: three watches, nothing changing, timeout_sec={IDLE_TIMEOUT_SEC}, measured over {IDLE_SECONDS:.0f} s
(requests the watches started in that window). Goal: <= 60/T + 1 = {idle_goal:.0f} requests per key per
minute: **{"met" if worst_idle <= idle_goal else "NOT met"}**.

| key | requests/min |
| --- | --- |
{rows}
"""
