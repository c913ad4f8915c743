"""The fake metadata server: how fast changes reach hanging GETs, how fast stop() ends them, GET rate.

Wake latency: set() -> the answer of one hanging wait_for_change GET, 300 changes.
Fan-out: 200 hanging GETs on their own connections, one change, until the last answer arrives.
Stop: stop() with 200 hanging GETs (the task's goal: under 1 s).
Rate: 2,000 plain GETs on one keep-alive connection.
All traffic is on loopback; every loop is bounded.
"""

from __future__ import annotations

import http.client
import statistics
import threading
import time

from bench.common import wait_until
from watchdog.fake.server import FakeMetadataServer

KEY = "instance/maintenance-event"
FLAVOR = {"Metadata-Flavor": "Google"}
CHANGES = 300
FAN_OUT = 200
PLAIN_GETS = 2000
WAKE_GOAL_P99_MS = 20.0
FAN_OUT_GOAL_S = 1.0
STOP_GOAL_S = 1.0
VALUES = ("TERMINATE_ON_HOST_MAINTENANCE", "NONE")


def _connection(fake: FakeMetadataServer) -> http.client.HTTPConnection:
    host, port = fake.address.rsplit(":", 1)
    return http.client.HTTPConnection(host, int(port), timeout=30)


def _hanging_get(connection: http.client.HTTPConnection, etag: str) -> tuple[int, bytes]:
    connection.request(
        "GET",
        f"/computeMetadata/v1/{KEY}?wait_for_change=true&last_etag={etag}&timeout_sec=60",
        headers=FLAVOR,
    )
    response = connection.getresponse()
    return response.status, response.read()


def measure_wake() -> list[float]:
    """Milliseconds from set() to the hanging GET's answer in hand."""
    latencies: list[float] = []
    with FakeMetadataServer() as fake:
        connection = _connection(fake)
        try:
            for i in range(CHANGES):
                etag = fake.store.lookup(KEY).etag  # type: ignore[union-attr]
                result: list[float] = []
                value = VALUES[i % 2]

                def client(etag: str = etag, result: list[float] = result, value: str = value) -> None:
                    status, body = _hanging_get(connection, etag)
                    assert (status, body.decode()) == (200, value), (status, body)
                    result.append(time.perf_counter())

                thread = threading.Thread(target=client)
                thread.start()
                wait_until(lambda: fake.hanging() == 1)
                sent = time.perf_counter()
                fake.set(KEY, value)
                thread.join(30)
                latencies.append((result[0] - sent) * 1000.0)
        finally:
            connection.close()
    return latencies


def _hang_many(fake: FakeMetadataServer, answers: list[float]) -> list[threading.Thread]:
    etag = fake.store.lookup(KEY).etag  # type: ignore[union-attr]

    def client() -> None:
        connection = _connection(fake)
        try:
            _hanging_get(connection, etag)
        except (OSError, http.client.HTTPException):
            pass  # stop() may close the connection instead of answering
        finally:
            connection.close()
        answers.append(time.perf_counter())

    threads = [threading.Thread(target=client) for _ in range(FAN_OUT)]
    for thread in threads:
        thread.start()
    wait_until(lambda: fake.hanging() == FAN_OUT)
    return threads


def measure_fan_out() -> float:
    """Seconds from one set() until all FAN_OUT hanging GETs have their answer."""
    answers: list[float] = []
    with FakeMetadataServer() as fake:
        threads = _hang_many(fake, answers)
        sent = time.perf_counter()
        fake.set(KEY, VALUES[0])
        for thread in threads:
            thread.join(30)
    return max(answers) - sent


def measure_stop() -> float:
    """Seconds stop() takes with FAN_OUT hanging GETs, up to the last client seeing its end."""
    answers: list[float] = []
    fake = FakeMetadataServer().start()
    threads = _hang_many(fake, answers)
    began = time.perf_counter()
    fake.stop()
    for thread in threads:
        thread.join(30)
    return max(answers) - began


def measure_rate() -> float:
    """Plain GETs per second on one keep-alive connection."""
    with FakeMetadataServer() as fake:
        connection = _connection(fake)
        try:
            began = time.perf_counter()
            for _ in range(PLAIN_GETS):
                connection.request("GET", f"/computeMetadata/v1/{KEY}", headers=FLAVOR)
                connection.getresponse().read()
            return PLAIN_GETS / (time.perf_counter() - began)
        finally:
            connection.close()


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def run() -> str:
    wake = sorted(measure_wake())
    p50 = statistics.median(wake)
    p99 = wake[int(len(wake) * 0.99) - 1]
    fan_out = measure_fan_out()
    stop = measure_stop()
    rate = measure_rate()
    return "\n".join(
        [
            "## fake_metadata: the fake GCE metadata server",
            "",
            "| measure | figure | goal | |",
            "| --- | --- | --- | --- |",
            f"| set() -> hanging GET answered ({CHANGES} changes) | p50 {p50:.2f} ms, p99 {p99:.2f} ms, "
            f"max {wake[-1]:.2f} ms | p99 < {WAKE_GOAL_P99_MS:.0f} ms | {_verdict(p99 < WAKE_GOAL_P99_MS)} |",
            f"| one change -> all {FAN_OUT} hanging GETs answered | {fan_out * 1000:.0f} ms | "
            f"< {FAN_OUT_GOAL_S:.0f} s | {_verdict(fan_out < FAN_OUT_GOAL_S)} |",
            f"| stop() with {FAN_OUT} hanging GETs, to the last client | {stop * 1000:.0f} ms | "
            f"< {STOP_GOAL_S:.0f} s | {_verdict(stop < STOP_GOAL_S)} |",
            f"| plain GETs on one keep-alive connection ({PLAIN_GETS}) | {rate:.0f} /s | (none) | |",
        ]
    )


if __name__ == "__main__":
    print(run())
