"""Who may read what, over real TCP from real addresses: /metrics and the probes to everyone, /status
(pids, process names, devices) only to the networks of http.status_allow, loopback by default.

The listener binds every interface, as the DaemonSet's does, and the client connects from one of this
machine's own non-loopback addresses (`ip addr`), so the daemon sees a peer that is not loopback.
"""

from __future__ import annotations

import http.client
import ipaddress
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator

import pytest

from tests.surface.test_httpapi import StubSurface
from watchdog.surface.httpapi import HttpSurface

PROBES = ("/metrics", "/livez", "/healthz", "/")


def global_address(family: str) -> str | None:
    """One of this machine's addresses of scope global (`ip -o addr`), or None."""
    if shutil.which("ip") is None:
        return None
    shown = subprocess.run(
        ["ip", "-o", family, "addr", "show", "scope", "global"], capture_output=True, text=True, check=False
    ).stdout
    found = re.findall(r"\binet6? ([0-9a-f.:]+)/", shown)
    return found[0] if found else None


IPV4 = global_address("-4")
IPV6 = global_address("-6")
needs_v4 = pytest.mark.skipif(IPV4 is None, reason="no non-loopback IPv4 address here (ip -4 addr)")
needs_v6 = pytest.mark.skipif(IPV6 is None, reason="no non-loopback IPv6 address here (ip -6 addr)")


def get(port: int, path: str, source: str, target: str | None = None) -> tuple[int, bytes]:
    """GET `path` from the address `source` (bound before connecting) to `target` (default: `source`)."""
    connection = http.client.HTTPConnection(target or source, port, timeout=5, source_address=(source, 0))
    try:
        connection.request("GET", path)
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


@pytest.fixture
def everywhere() -> Iterator[int]:
    """A listener on every IPv4 interface, default status_allow; its port."""
    http = HttpSurface("0.0.0.0:0", StubSurface())  # every interface, as the DaemonSet
    http.start()
    yield int(http.address.rpartition(":")[2])
    http.stop()


@needs_v4
def test_a_remote_client_gets_metrics_and_probes_but_not_status(everywhere: int) -> None:
    assert IPV4 is not None
    assert not ipaddress.ip_address(IPV4).is_loopback
    for path in PROBES:
        assert get(everywhere, path, IPV4)[0] == 200, path
    status, body = get(everywhere, "/status", IPV4)
    assert status == 403
    assert b"http.status_allow" in body
    assert b"draining" not in body  # nothing of the status leaks into the refusal


@needs_v4
def test_loopback_reads_status_by_default(everywhere: int) -> None:
    status, body = get(everywhere, "/status", "127.0.0.1")
    assert status == 200
    assert b'"state": "draining"' in body


@needs_v4
def test_a_network_in_status_allow_reads_status_and_others_still_do_not() -> None:
    assert IPV4 is not None
    http = HttpSurface("0.0.0.0:0", StubSurface(), status_allow=(f"{IPV4}/32",))
    http.start()
    try:
        port = int(http.address.rpartition(":")[2])
        assert get(port, "/status", IPV4)[0] == 200
        assert get(port, "/status", "127.0.0.1")[0] == 403  # loopback is not in this list
    finally:
        http.stop()


def test_an_empty_status_allow_serves_status_to_nobody() -> None:
    http = HttpSurface("127.0.0.1:0", StubSurface(), status_allow=())
    http.start()
    try:
        port = int(http.address.rpartition(":")[2])
        assert get(port, "/status", "127.0.0.1")[0] == 403
        assert get(port, "/metrics", "127.0.0.1")[0] == 200
    finally:
        http.stop()


@needs_v6
def test_on_an_ipv6_listener_ipv4_loopback_is_loopback_and_a_global_v6_is_not() -> None:
    assert IPV6 is not None
    http = HttpSurface("[::]:0", StubSurface())
    http.start()
    try:
        port = int(http.address.rpartition(":")[2])
        dual_stack = socket.has_dualstack_ipv6()
        if dual_stack:  # IPv4 arrives as ::ffff:127.0.0.1
            assert get(port, "/status", "127.0.0.1")[0] == 200
        assert get(port, "/status", "::1")[0] == 200
        assert get(port, "/status", IPV6)[0] == 403
        assert get(port, "/metrics", IPV6)[0] == 200
    finally:
        http.stop()
