"""The HTTP surface over real HTTP: the four endpoints, read-only, and clear answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from prometheus_client import CollectorRegistry, Gauge

from watchdog.httpapi import HttpSurface, parse_listen


class StubSurface:
    """A real registry and fixed answers: the daemon is not what is under test here."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        Gauge("tpu_watchdog_state", "state", ["state"], registry=self.registry).labels("idle").set(1)
        self.healthy = (True, "ok: 3 watches answering")
        self.ready = (False, "not ready: draining for maintenance-event TERMINATE_ON_HOST_MAINTENANCE")

    def status(self) -> dict[str, Any]:
        return {"state": "draining"}

    def health(self) -> tuple[bool, str]:
        return self.healthy

    def readiness(self) -> tuple[bool, str]:
        return self.ready


@pytest.fixture
def served() -> Iterator[tuple[str, StubSurface]]:
    surface = StubSurface()
    http = HttpSurface("127.0.0.1:0", surface)
    http.start()
    yield f"http://{http.address}", surface
    http.stop()


def test_metrics_are_served(served: tuple[str, StubSurface]) -> None:
    base, _ = served
    answer = requests.get(f"{base}/metrics", timeout=5)
    assert answer.status_code == 200
    assert 'tpu_watchdog_state{state="idle"} 1.0' in answer.text
    assert answer.headers["Content-Type"].startswith("text/plain")


def test_health_and_readiness_say_why(served: tuple[str, StubSurface]) -> None:
    base, surface = served
    assert requests.get(f"{base}/healthz", timeout=5).status_code == 200
    not_ready = requests.get(f"{base}/readyz", timeout=5)
    assert not_ready.status_code == 503
    assert "draining" in not_ready.text
    surface.healthy = (False, "unhealthy: main loop silent for 40 s")
    sick = requests.get(f"{base}/healthz", timeout=5)
    assert sick.status_code == 503
    assert "main loop" in sick.text


def test_status_is_json(served: tuple[str, StubSurface]) -> None:
    base, _ = served
    assert json.loads(requests.get(f"{base}/status", timeout=5).text) == {"state": "draining"}


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_only_get_and_head_are_allowed(served: tuple[str, StubSurface], method: str) -> None:
    base, _ = served
    answer = requests.request(method, f"{base}/status", timeout=5)
    assert answer.status_code == 405
    assert answer.headers["Allow"] == "GET, HEAD"


def test_head_has_no_body(served: tuple[str, StubSurface]) -> None:
    base, _ = served
    answer = requests.head(f"{base}/status", timeout=5)
    assert answer.status_code == 200
    assert answer.content == b""
    assert int(answer.headers["Content-Length"]) > 0


def test_unknown_path_is_404(served: tuple[str, StubSurface]) -> None:
    base, _ = served
    assert requests.get(f"{base}/nope", timeout=5).status_code == 404


@pytest.mark.parametrize("bad", ["9478", "localhost", "host:port", "1.2.3.4:70000", ":80"])
def test_a_bad_listen_address_is_named(bad: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_listen(bad)


def test_ipv6_listen_is_parsed() -> None:
    assert parse_listen("[::1]:9478") == ("::1", 9478)
