"""The request-head parser on its own (pure): what it accepts, and the status of each refusal. The listener
tests (test_httpapi*.py) send the same over real sockets."""

from __future__ import annotations

import pytest

from watchdog.surface.httphead import (
    MAX_HEADER_BYTES,
    MAX_HEADERS,
    MAX_REQUEST_LINE,
    RequestError,
    check_limits,
    parse_head,
)


def test_a_plain_head_parses_with_lower_case_names_and_repeats_joined() -> None:
    head = b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: text/plain\r\naccept: */*\r\n"
    assert parse_head(head) == (
        "GET", "/metrics?x=1", "HTTP/1.1", {"host": "a", "accept": "text/plain, */*"}
    )  # fmt: skip


@pytest.mark.parametrize(
    ("head", "code"),
    [
        (b"GET /metrics\r\n", 400),  # HTTP/0.9: no status line to answer with
        (b"GET  /metrics HTTP/1.1\r\n", 400),  # two spaces
        (b"GET /a\x00b HTTP/1.1\r\n", 400),
        (b"GET /metrics HTTP/2.0\r\n", 505),
        (b"GET /metrics HTTP/1.1\r\nNo colon here\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nX: a\rb\r\n", 400),  # a bare CR in a value
        (b"GET /metrics HTTP/1.1\r\nX: a\r\n folded\r\n", 400),  # obs-fold
        (b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * (MAX_HEADERS + 1), 431),
    ],
)
def test_malformed_heads_are_refused_with_their_status(head: bytes, code: int) -> None:
    with pytest.raises(RequestError) as refused:
        parse_head(head)
    assert refused.value.code == code


def test_limits_refuse_a_head_before_it_is_complete() -> None:
    check_limits(b"G" * (MAX_REQUEST_LINE - 1))  # not yet over: keep reading
    with pytest.raises(RequestError) as long_line:
        check_limits(b"G" * MAX_REQUEST_LINE)
    assert long_line.value.code == 414
    with pytest.raises(RequestError) as big_headers:
        check_limits(b"GET / HTTP/1.1\n" + b"X" * (MAX_HEADER_BYTES + 1))
    assert big_headers.value.code == 431
