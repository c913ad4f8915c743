"""The HTTP surface over real HTTP: the four endpoints, read-only, clear answers, and its limits held."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from prometheus_client import CollectorRegistry, Gauge

from tests.support.readable import readable
from tests.support.waiting import wait_for
from tests.support.wakeups import asleep, wakeups
from watchdog.surface.httpapi import (
    CONNECTION_TIMEOUT,
    MAX_CONNECTIONS,
    HttpSurface,
    RetryingListener,
    parse_listen,
)
from watchdog.surface.httphead import MAX_HEADER_BYTES, MAX_HEADERS, MAX_REQUEST_LINE


class StubSurface:
    """A real registry and fixed answers: the daemon is not what is under test here."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        Gauge("tpu_watchdog_state", "state", ["state"], registry=self.registry).labels("idle").set(1)
        self.live = (True, "ok")
        self.healthy = (True, "ok: 3 watches answering")
        self.ready = (False, "not ready: draining for maintenance-event TERMINATE_ON_HOST_MAINTENANCE")

    def status(self) -> dict[str, Any]:
        return {"state": "draining"}

    def liveness(self) -> tuple[bool, str]:
        return self.live

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
    surface.healthy = (False, "unhealthy: no good answer from instance/preempted for 200 s")
    sick = requests.get(f"{base}/healthz", timeout=5)
    assert sick.status_code == 503
    assert "no good answer" in sick.text
    assert requests.get(f"{base}/livez", timeout=5).status_code == 200  # a restart would not fix that
    surface.live = (False, "unhealthy: the main loop has not ticked for 40 s")
    dead = requests.get(f"{base}/livez", timeout=5)
    assert dead.status_code == 503
    assert "main loop" in dead.text


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


def test_an_idle_listener_sleeps_until_a_connection_and_stops_at_once() -> None:
    """No poll interval (socketserver's serve_forever wakes every 0.5 s to look for a shutdown): the
    listener blocks until a client connects, and stop() wakes it through its own socket."""
    http = HttpSurface("127.0.0.1:0", StubSurface())
    http.start()
    try:
        assert requests.get(f"http://{http.address}/livez", timeout=5).status_code == 200
        # The listener may still be handing that connection over (a thread start waits on a lock): the
        # window opens once it is back in its select.
        wait_for(lambda: asleep(http._thread, in_kernel="epoll"), what="the listener back in its select")
        assert wakeups(http._thread, over=1.2) == 0
        assert requests.get(f"http://{http.address}/livez", timeout=5).status_code == 200  # still serving
    finally:
        started = time.monotonic()
        http.stop()
    assert time.monotonic() - started < 1.0  # woken, not waiting out a poll or the 5 s join
    assert not http._thread.is_alive()


@pytest.mark.parametrize("bad", ["9478", "localhost", "host:port", "1.2.3.4:70000", ":80"])
def test_a_bad_listen_address_is_named(bad: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_listen(bad)


def test_ipv6_listen_is_parsed() -> None:
    assert parse_listen("[::1]:9478") == ("::1", 9478)


# Raw-socket tests: the limits, timeouts and error pages, as any client (or attacker) would meet them.

MARK = b"XSSMARK<script>"  # must never come back in a response, escaped or not
PROBE = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.fixture(scope="module")
def raw() -> Iterator[tuple[str, int]]:
    """One listener with the production timeout and cap for the module."""
    http = HttpSurface("127.0.0.1:0", StubSurface())
    http.start()
    host, port = http.address.rsplit(":", 1)
    yield host, int(port)
    http.stop()


def serve_quick(connection_timeout: float = 0.3, max_connections: int = MAX_CONNECTIONS) -> HttpSurface:
    """A started listener with a short timeout: a test waits on its closing a connection, not for 10 s."""
    http = HttpSurface("127.0.0.1:0", StubSurface(), connection_timeout, max_connections)
    http.start()
    return http


def address_of(http: HttpSurface) -> tuple[str, int]:
    host, port = http.address.rsplit(":", 1)
    return host, int(port)


def exchange(address: tuple[str, int], data: bytes, half_close: bool = True, timeout: float = 5.0) -> bytes:
    """Send `data`, optionally half-close, and read until the server closes (or resets) the connection.

    Without the half-close, returning at all shows the server closed on its own; a hang fails on `timeout`,
    which is shorter than the listener's 10 s, so a server waiting for more bytes would fail the test.
    """
    with socket.create_connection(address, timeout=timeout) as sock:
        with contextlib.suppress(OSError):  # refused early and reset: the answer may already be waiting
            sock.sendall(data)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        return read_to_end(sock)


def read_to_end(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def status_of(answer: bytes) -> int:
    match = re.match(rb"HTTP/1\.1 (\d{3}) ", answer)
    assert match, answer[:200]
    return int(match.group(1))


def closed_by_server(sock: socket.socket) -> bool:
    """True once the server has closed `sock` (EOF or reset); never blocks."""
    try:
        return bool(readable([sock])) and sock.recv(65536, socket.MSG_PEEK) == b""
    except ConnectionError:
        return True


def test_a_request_line_up_to_the_limit_is_read(raw: tuple[str, int]) -> None:
    line = b"GET /" + b"a" * (MAX_REQUEST_LINE - len(b"GET / HTTP/1.1\r\n")) + b" HTTP/1.1\r\n"
    assert len(line) == MAX_REQUEST_LINE
    assert status_of(exchange(raw, line + b"\r\n")) == 404


def test_a_longer_request_line_is_414_at_once_and_closed(raw: tuple[str, int]) -> None:
    answer = exchange(raw, b"GET /" + b"a" * MAX_REQUEST_LINE, half_close=False)  # no line end, no EOF
    assert status_of(answer) == 414
    assert b"\r\nConnection: close\r\n" in answer
    assert status_of(exchange(raw, PROBE)) == 200


def test_headers_up_to_the_limits_are_read(raw: tuple[str, int]) -> None:
    many = b"".join(b"X-%d: y\r\n" % n for n in range(MAX_HEADERS))
    assert status_of(exchange(raw, b"GET /healthz HTTP/1.1\r\n" + many + b"\r\n")) == 200
    pad = b"X-Pad: " + b"p" * (MAX_HEADER_BYTES - len(b"X-Pad: \r\n")) + b"\r\n"
    assert len(pad) == MAX_HEADER_BYTES
    assert status_of(exchange(raw, b"GET /healthz HTTP/1.1\r\n" + pad + b"\r\n")) == 200


@pytest.mark.parametrize(
    "fields",
    [
        b"".join(b"X-%d: y\r\n" % n for n in range(MAX_HEADERS + 1)),
        b"X-Pad: " + b"p" * MAX_HEADER_BYTES + b"\r\n",
        b"X-Huge: " + b"h" * 1_000_000 + b"\r\n",  # 1 MB: refused at 16 KiB, without waiting for the rest
        b"".join(b"X-%d: y\r\n" % n for n in range(10_000)),
    ],
    ids=["65-headers", "16-KiB-and-more", "1-MB-header", "10000-headers"],
)
def test_too_many_or_too_large_headers_are_431(raw: tuple[str, int], fields: bytes) -> None:
    answer = exchange(raw, b"GET /healthz HTTP/1.1\r\n" + fields + b"\r\n", half_close=False)
    assert status_of(answer) == 431
    assert status_of(exchange(raw, PROBE)) == 200


@pytest.mark.parametrize(
    ("field", "code"),
    [
        (b"Content-Length: 1000000", 413),  # no body follows: answered at once, so the body is never awaited
        (b"Transfer-Encoding: chunked", 413),
        (b"Content-Length: abc", 400),
        (b"Content-Length: 0", 200),
    ],
)
def test_a_request_body_is_refused_unread(raw: tuple[str, int], field: bytes, code: int) -> None:
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + field + b"\r\nConnection: close\r\n\r\n"
    assert status_of(exchange(raw, head, half_close=False)) == code


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"GET /", 400),  # HTTP/0.9 has no status line to answer with
        (b"GET / HTTP/0.9", 505),
        (b"GET / HTTP/2.0", 505),
        (b"GET / http/1.1", 400),
        (b"GET  / HTTP/1.1", 400),
        (b"GET /a\rb HTTP/1.1", 400),
        (b"GET /\x00 HTTP/1.1", 400),
        (b"BREW / HTTP/1.1", 405),
    ],
)
def test_malformed_request_lines_get_a_status_line(raw: tuple[str, int], line: bytes, code: int) -> None:
    assert status_of(exchange(raw, line + b"\r\n\r\n")) == code


@pytest.mark.parametrize("field", [b"NoColon", b" obs-fold", b"Bad Name: x", b"X: a\x00b", b"X: a\rb"])
def test_malformed_header_lines_are_400(raw: tuple[str, int], field: bytes) -> None:
    assert status_of(exchange(raw, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + field + b"\r\n\r\n")) == 400


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /" + MARK + b" HTTP/1.1\r\n\r\n",
        b"GET /healthz?" + MARK + b" HTTP/1.1\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nX-" + MARK + b": v\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nX-Mark: " + MARK + b"\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\n" + MARK + b"\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nContent-Length: " + MARK + b"\r\n\r\n",
        b"XSSMARK / HTTP/1.1\r\n\r\n",
        b"POST /" + MARK + b" HTTP/1.1\r\n\r\n",
        b"GET / HTTP/" + MARK + b"\r\n\r\n",
        b"GET / " + MARK + b"\r\n\r\n",
        b"GET /" + MARK + b"\r\n\r\n",
        b"GET /" + MARK * 1000 + b" HTTP/1.1\r\n\r\n",
        b"HEAD /" + MARK + b" HTTP/1.1\r\n\r\n",
    ],
)
def test_no_request_byte_is_reflected(raw: tuple[str, int], request_bytes: bytes) -> None:
    answer = exchange(raw, request_bytes)
    assert status_of(answer) in (200, 400, 404, 405, 414, 505)
    assert b"XSSMARK" not in answer
    assert b"\r\nServer: tpu-watchdog\r\n" in answer
    assert b"Python" not in answer


def test_a_failing_page_is_a_fixed_500_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    surface = StubSurface()

    def broken() -> dict[str, Any]:
        raise RuntimeError(f"secret {MARK.decode()}")

    surface.status = broken  # type: ignore[method-assign]
    http = HttpSurface("127.0.0.1:0", surface)
    http.start()
    try:
        answer = exchange(address_of(http), b"GET /status HTTP/1.1\r\n\r\n")
        assert status_of(answer) == 500
        assert answer.endswith(b"\r\n\r\ninternal error\n")
        assert b"XSSMARK" not in answer
        assert MARK.decode() in caplog.text
        assert status_of(exchange(address_of(http), PROBE)) == 200
    finally:
        http.stop()


def test_keep_alive_serves_pipelined_requests_then_idles_out() -> None:
    http = serve_quick()
    try:
        with socket.create_connection(address_of(http), timeout=5) as sock:
            sock.sendall(PROBE + b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            answers = b""
            while not answers.endswith(b'tpu_watchdog_state{state="idle"} 1.0\n'):
                chunk = sock.recv(65536)
                assert chunk, answers
                answers += chunk
            assert answers.count(b"HTTP/1.1 200 ") == 2
            wait_for(lambda: closed_by_server(sock), what="the idle keep-alive connection to be dropped")
    finally:
        http.stop()


def test_a_client_trickling_its_request_is_dropped() -> None:
    """A per-read timeout would never fire here: each byte arrives well inside it. The head deadline does."""
    http = serve_quick()
    trickle = iter(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"s" * 4096)
    try:
        with socket.create_connection(address_of(http), timeout=5) as sock:

            def dropped() -> bool:
                try:
                    sock.send(bytes([next(trickle)]))
                except ConnectionError:
                    return True
                return closed_by_server(sock)

            wait_for(dropped, timeout=10, interval=0.02, what="the trickling client to be dropped")
            assert next(trickle, None) is not None  # dropped mid-head, not by a size limit
    finally:
        http.stop()


def test_connections_beyond_the_cap_are_closed_at_once() -> None:
    http = serve_quick(connection_timeout=CONNECTION_TIMEOUT, max_connections=2)
    address = address_of(http)
    try:
        held = [socket.create_connection(address, timeout=5) for _ in range(2)]
        assert exchange(address, PROBE, half_close=False) == b""  # closed unanswered, before any timeout
        for sock in held:
            sock.close()
        wait_for(lambda: exchange(address, PROBE).startswith(b"HTTP/1.1 200 "), what="a free slot")
    finally:
        http.stop()


def test_scrapes_and_probes_are_answered_despite_100_slowloris_clients() -> None:
    http = serve_quick(connection_timeout=0.5)
    address = address_of(http)
    base = f"http://{http.address}"
    slow = [socket.create_connection(address, timeout=5) for _ in range(100)]
    for n, sock in enumerate(slow[::2]):  # half send a partial request line; half send nothing at all
        sock.sendall(b"GET /healthz?%d HT" % n)

    def answered() -> bool:
        for sock in slow:  # keep trickling: this must not keep a slot held
            with contextlib.suppress(OSError):
                sock.send(b"T")
        try:
            health = requests.get(f"{base}/healthz", timeout=2)
            metrics = requests.get(f"{base}/metrics", timeout=2)
        except requests.RequestException:
            return False
        return health.status_code == 200 and metrics.status_code == 200

    try:
        wait_for(answered, timeout=15, interval=0.05, what="/healthz and /metrics while slow clients hold on")
    finally:
        for sock in slow:
            sock.close()
        http.stop()


def test_a_taken_port_is_retried_until_free_then_served() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    attempts: list[tuple[str, str | None]] = []
    listener = RetryingListener(f"127.0.0.1:{port}", StubSurface(), lambda *a: attempts.append(a), retry=0.05)
    try:
        listener.start()  # returns at once: the caller (the daemon) never waits for the port
        assert listener.http is None
        wait_for(lambda: len(attempts) >= 3, what="three attempts on the taken port")
        assert {error for _, error in attempts} == {"Address already in use"}
        taken.close()
        wait_for(lambda: attempts[-1][1] is None, what="the bind once the port is free")
        assert attempts[-1][0] == f"127.0.0.1:{port}"
        answer = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert 'tpu_watchdog_state{state="idle"} 1.0' in answer.text
    finally:
        listener.close()
        taken.close()
    tried = len(attempts)
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    assert len(attempts) == tried  # closed: no attempt after


def test_a_teller_that_raises_on_every_attempt_ends_neither_the_retries_nor_the_bind() -> None:
    """The daemon's teller logs and counts each attempt: one that raised once ended the http-bind thread,
    and a port freed later was never listened on."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    attempts: list[str | None] = []

    def raising(address: str, error: str | None) -> None:
        attempts.append(error)
        raise RuntimeError("the journal is gone")

    listener = RetryingListener(f"127.0.0.1:{port}", StubSurface(), raising, retry=0.05)
    try:
        listener.start()
        wait_for(lambda: len(attempts) >= 2, what="an attempt after the one that raised")
        taken.close()
        wait_for(lambda: attempts[-1] is None, what="the bind once the port is free")
        answer = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert answer.status_code == 200
    finally:
        listener.close()
        taken.close()


def test_a_listener_closed_while_retrying_stops_trying() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    attempts: list[tuple[str, str | None]] = []
    listener = RetryingListener(
        f"127.0.0.1:{taken.getsockname()[1]}", StubSurface(), lambda *a: attempts.append(a), retry=0.05
    )
    listener.start()
    wait_for(lambda: attempts, what="the first attempt")
    listener.close()
    assert listener._thread is not None
    assert not listener._thread.is_alive()
    taken.close()
