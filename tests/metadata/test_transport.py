"""The transport against the fake over real HTTP: headers, no proxies, every failure classified."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.waiting import wait_for
from watchdog.fake.server import FakeMetadataServer, Fault
from watchdog.metadata.errors import ErrorKind, MetadataError
from watchdog.metadata.transport import (
    DEFAULT_HOST,
    MAX_BODY_BYTES,
    MetadataTransport,
    resolve_metadata_host,
)

PREEMPTED = "instance/preempted"


def test_host_resolution_order() -> None:
    env = {"GCE_METADATA_HOST": "127.0.0.1:8080"}
    assert resolve_metadata_host("10.0.0.1:1", env) == "10.0.0.1:1"
    assert resolve_metadata_host(None, env) == "127.0.0.1:8080"
    assert resolve_metadata_host("", env) == "127.0.0.1:8080"
    assert resolve_metadata_host(None, {}) == DEFAULT_HOST == "metadata.google.internal"
    assert resolve_metadata_host(None, {"GCE_METADATA_HOST": "  "}) == DEFAULT_HOST


@pytest.mark.parametrize("bad", ["http://127.0.0.1:80", "host name", "a/b", "x\x00"])
def test_bad_host_is_refused_naming_the_source(bad: str) -> None:
    with pytest.raises(ValueError, match="GCE_METADATA_HOST"):
        resolve_metadata_host(None, {"GCE_METADATA_HOST": bad})


def test_get_sends_the_flavor_and_returns_value_and_etag(
    fake: FakeMetadataServer, transport: MetadataTransport
) -> None:
    response = transport.get(PREEMPTED)
    assert (response.status, response.body) == (200, "FALSE")
    assert response.etag
    [record] = fake.requests()
    assert record.flavor_present
    assert record.path == PREEMPTED


def test_hanging_get_carries_etag_and_timeout(fake: FakeMetadataServer, transport: MetadataTransport) -> None:
    etag = transport.get(PREEMPTED).etag
    unchanged = transport.get(PREEMPTED, wait_for_change=True, last_etag=etag, timeout_sec=1, read_timeout=5)
    assert (unchanged.body, unchanged.etag) == ("FALSE", etag)
    assert "wait_for_change=true" in fake.requests()[-1].query
    assert f"last_etag={etag}" in fake.requests()[-1].query
    assert "timeout_sec=1" in fake.requests()[-1].query


def test_no_proxy_even_when_the_environment_names_one(
    fake: FakeMetadataServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as proxy:
        proxy.bind(("127.0.0.1", 0))
        proxy.listen(8)
        proxy.setblocking(False)
        proxy_url = f"http://127.0.0.1:{proxy.getsockname()[1]}"
        for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.setenv(name, proxy_url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        with MetadataTransport(fake.address) as transport:
            assert transport.get(PREEMPTED).body == "FALSE"
        with pytest.raises(BlockingIOError):
            proxy.accept()  # nobody ever connected to the proxy
    assert fake.requests()[-1].flavor_present


def _error(transport: MetadataTransport, **kwargs: object) -> MetadataError:
    with pytest.raises(MetadataError) as caught:
        transport.get(PREEMPTED, **kwargs)  # type: ignore[arg-type]
    return caught.value


@pytest.mark.parametrize(
    ("fault", "kind"),
    [
        (Fault(kind="status", status=503), ErrorKind.HTTP_5XX),
        (Fault(kind="status", status=500), ErrorKind.HTTP_5XX),
        (Fault(kind="status", status=429), ErrorKind.HTTP_429),
        (Fault(kind="status", status=403), ErrorKind.HTTP_403),
        (Fault(kind="status", status=404), ErrorKind.HTTP_404),
        (Fault(kind="status", status=400), ErrorKind.HTTP_4XX),
        (Fault(kind="reset"), ErrorKind.CONNECTION_RESET),
        (Fault(kind="garbage"), ErrorKind.BODY_NOT_TEXT),
        (Fault(kind="oversized"), ErrorKind.BODY_TOO_LARGE),
        (Fault(kind="no_flavor"), ErrorKind.MISSING_FLAVOR),
        (Fault(kind="delay", seconds=30.0), ErrorKind.TIMEOUT),
        # A byte every 0.2 s: each read is within the 0.3 s timeout, the whole body is not.
        (Fault(kind="trickle", seconds=1.0), ErrorKind.TIMEOUT),
    ],
)
def test_every_fault_is_classified_and_the_next_request_works(
    fake: FakeMetadataServer, transport: MetadataTransport, fault: Fault, kind: ErrorKind
) -> None:
    fake.add_fault(fault)
    error = _error(transport, read_timeout=0.3)
    assert error.kind is kind, error
    assert error.path == PREEMPTED
    assert transport.get(PREEMPTED).body == "FALSE"


def test_pass_statuses_returns_the_body_for_the_caller_to_judge(
    fake: FakeMetadataServer, transport: MetadataTransport
) -> None:
    response = transport.get("instance/upcoming-maintenance", alt="json", pass_statuses=(503,))
    assert response.status == 503
    assert "no notifications" in response.body
    fake.add_fault(Fault(kind="status", status=503, path=PREEMPTED))
    assert _error(transport, pass_statuses=(404,)).kind is ErrorKind.HTTP_5XX


def test_connection_refused(free_port: int) -> None:
    with MetadataTransport(f"127.0.0.1:{free_port}") as transport:
        assert _error(transport).kind is ErrorKind.CONNECTION_REFUSED


def test_a_name_that_does_not_resolve_is_dns_not_timeout() -> None:
    # .invalid never resolves (RFC 6761): the real resolver answers "no such name" at once.
    with MetadataTransport("metadata.tpu-watchdog-test.invalid") as transport:
        assert _error(transport).kind is ErrorKind.DNS


def test_body_cap_is_64_kib(fake: FakeMetadataServer, transport: MetadataTransport) -> None:
    fake.set("instance/attributes/big", "x" * MAX_BODY_BYTES)
    assert len(transport.get("instance/attributes/big").body) == MAX_BODY_BYTES
    fake.set("instance/attributes/big", "x" * (MAX_BODY_BYTES + 1))
    with pytest.raises(MetadataError) as caught:
        transport.get("instance/attributes/big")
    assert caught.value.kind is ErrorKind.BODY_TOO_LARGE


@pytest.mark.parametrize("path", ["/instance/id", "../x", "instance/id?x=1", ""])
def test_bad_paths_are_refused_before_any_request(
    fake: FakeMetadataServer, transport: MetadataTransport, path: str
) -> None:
    with pytest.raises(MetadataError, match="relative"):
        transport.get(path)
    assert fake.requests() == []


@pytest.fixture
def hanging(transport: MetadataTransport) -> Iterator[list[object]]:
    """A hanging GET in a thread; the list gets its outcome (response or error)."""
    outcome: list[object] = []
    etag = transport.get(PREEMPTED).etag

    def hang() -> None:
        try:
            outcome.append(
                transport.get(
                    PREEMPTED, wait_for_change=True, last_etag=etag, timeout_sec=30, read_timeout=40
                )
            )
        except MetadataError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=hang)
    thread.start()
    yield outcome
    thread.join(5)
    assert not thread.is_alive()


def test_close_ends_a_hanging_get_at_once(
    fake: FakeMetadataServer, transport: MetadataTransport, hanging: list[object]
) -> None:
    wait_for(lambda: fake.store.waiting() == 1, what="the GET to hang on the server")
    started = time.monotonic()
    transport.close()
    wait_for(lambda: hanging, timeout=5, what="the hanging GET to end")
    assert time.monotonic() - started < 1.0
    [error] = hanging
    assert isinstance(error, MetadataError)
    assert "closed" in error.detail
    with pytest.raises(MetadataError, match="closed"):
        transport.get(PREEMPTED)


def test_a_body_shorter_than_its_content_length_is_an_error_not_a_value() -> None:
    # A real server that declares 5 bytes, sends 1 and closes: urllib3 2 raises, urllib3 1.26 (Ubuntu
    # 22.04's) would hand back "F" as if it were the whole of "FALSE".
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def answer_short() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.recv(65536)
                head = "HTTP/1.1 200 OK\r\nMetadata-Flavor: Google\r\nContent-Length: 5\r\n\r\n"
                connection.sendall(head.encode() + b"F")

        server = threading.Thread(target=answer_short)
        server.start()
        with MetadataTransport(f"127.0.0.1:{listener.getsockname()[1]}") as transport:
            error = _error(transport)
        server.join(5)
    assert error.kind is ErrorKind.CONNECTION_RESET, error
