"""Shared fixtures: a real fake metadata server on an ephemeral loopback port, and a transport to it."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from watchdog.fake.server import FakeMetadataServer
from watchdog.metadata.transport import MetadataTransport


@pytest.fixture
def fake() -> Iterator[FakeMetadataServer]:
    with FakeMetadataServer(listen="127.0.0.1:0") as server:
        yield server


@pytest.fixture
def transport(fake: FakeMetadataServer) -> Iterator[MetadataTransport]:
    with MetadataTransport(fake.address) as client:
        yield client


@pytest.fixture
def free_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
