"""Listen addresses: parsing, and the refusal to listen off loopback without allow_remote."""

from __future__ import annotations

import socket

import pytest

from watchdog.fake.listen import ListenAddress, check_listen, parse_listen


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [("127.0.0.1:8053", "127.0.0.1", 8053), ("[::1]:0", "::1", 0), ("localhost:80", "localhost", 80)],
)
def test_parse(text: str, host: str, port: int) -> None:
    assert parse_listen(text) == ListenAddress(host, port)


@pytest.mark.parametrize(
    "text", ["127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "::1:80", "[::1]80", "host:1"]
)
def test_bad_addresses(text: str) -> None:
    with pytest.raises(ValueError, match="bad listen address"):
        parse_listen(text)


@pytest.mark.parametrize("text", ["127.0.0.1:1", "127.8.9.10:1", "[::1]:1", "localhost:1"])
def test_loopback_is_allowed(text: str) -> None:
    check_listen(parse_listen(text), allow_remote=False)


@pytest.mark.parametrize("text", ["0.0.0.0:1", "10.1.2.3:1", "[::]:1"])
def test_remote_needs_allow_remote(text: str) -> None:
    with pytest.raises(ValueError, match="not a loopback address"):
        check_listen(parse_listen(text), allow_remote=False)
    check_listen(parse_listen(text), allow_remote=True)


def test_family_and_bind_host() -> None:
    assert parse_listen("[::1]:0").family == socket.AF_INET6
    assert parse_listen("localhost:0").bind_host == "127.0.0.1"
