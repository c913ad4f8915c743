"""A fuzz pass over the HTTP listener's wire: whatever arrives, it answers or closes, and keeps serving."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.surface.test_httpapi import PROBE, StubSurface, exchange
from watchdog.surface.httpapi import HttpSurface

ALLOWED = {200, 400, 404, 405, 413, 414, 431, 503, 505}


class Run(NamedTuple):
    """`prefix` then `size` copies of `byte`: a huge path or header that hypothesis can print in a line."""

    prefix: bytes
    byte: bytes
    size: int


def wire(pieces: Sequence[bytes | Run]) -> bytes:
    return b"".join(p.prefix + p.byte * p.size if isinstance(p, Run) else p for p in pieces)


METHODS = st.sampled_from([b"GET", b"HEAD", b"POST", b"get", b"G\x00T", b"", b"<script>"]) | st.binary(
    max_size=8
)
TARGETS = (
    st.sampled_from([b"/", b"/healthz", b"/metrics", b"/status", b"*", b"http://x/", b"//x", b"/%00", b""])
    | st.binary(max_size=40)
    | st.integers(1, 20_000).map(lambda n: Run(b"/", b"a", n))  # up to well past the 8 KiB request line
)
VERSIONS = st.sampled_from(
    [
        b"HTTP/1.1",
        b"HTTP/1.0",
        b"HTTP/0.9",
        b"HTTP/2.0",
        b"HTTP/1",
        b"HTTP/1.1.1",
        b"HTTP/99999999999.1",
        b"http/1.1",
        b"HTTP/1.1 x",
        b"HTTP/\xff",
        b"",
    ]
) | st.binary(max_size=10)
SEPARATORS = st.sampled_from([b" ", b"  ", b"\t", b"\x00", b"\r", b""])
LINE_ENDS = st.sampled_from([b"\r\n", b"\n", b"\r", b""])  # a bare CR is the "CR without LF" case
ODD_FIELDS = [
    b"Host: x",
    b"NoColonHere",
    b" obs-fold continuation",
    b"\tfolded",
    b"X: a\x00b",
    b"X : y",
    b": v",
    b"Content-Length: 5",
    b"Content-Length: -1",
    b"Transfer-Encoding: chunked",
    b"Connection: close",
    b"Expect: 100-continue",
    b"Connection: keep-alive",
]
FIELDS = (
    st.sampled_from(ODD_FIELDS)
    | st.binary(max_size=60)
    | st.integers(1, 40_000).map(lambda n: Run(b"X-Big: ", b"b", n))  # past the 16 KiB of headers
)


@st.composite
def heads(draw: st.DrawFn) -> list[bytes | Run]:
    """A request head that is mostly right and wrong in a few places: where parsers go astray."""
    sep = draw(SEPARATORS)
    line = [draw(METHODS), sep, draw(TARGETS), sep, draw(VERSIONS), draw(LINE_ENDS)]
    fields = [piece for pair in draw(st.lists(st.tuples(FIELDS, LINE_ENDS), max_size=6)) for piece in pair]
    return [*line, *fields, draw(LINE_ENDS)]


@pytest.fixture(scope="module")
def address() -> Iterator[tuple[str, int]]:
    """One listener for every example; its timeout is far inside `exchange`'s 5 s wait for an answer."""
    http = HttpSurface("127.0.0.1:0", StubSurface(), connection_timeout=0.25)
    http.start()
    host, port = http.address.rsplit(":", 1)
    yield host, int(port)
    http.stop()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=300).map(lambda b: [b]) | heads())
def test_any_bytes_get_a_known_status_or_a_close_and_serving_goes_on(
    address: tuple[str, int], data: list[bytes | Run]
) -> None:
    check(exchange(address, wire(data)), address)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=heads())
def test_a_client_that_stops_sending_is_answered_or_dropped_by_the_deadline(
    address: tuple[str, int], data: list[bytes | Run]
) -> None:
    check(exchange(address, wire(data), half_close=False), address)  # no EOF: only the head deadline ends it


def check(answer: bytes, address: tuple[str, int]) -> None:
    """A status line from the allowed set, or nothing (closed); then the listener still answers a probe."""
    if answer:
        match = re.match(rb"HTTP/1\.1 (\d{3}) ", answer)
        assert match, answer[:200]
        assert int(match.group(1)) in ALLOWED
    assert exchange(address, PROBE).startswith(b"HTTP/1.1 200 ")
