"""Shared fixtures: a real fake metadata server on an ephemeral loopback port, and a transport to it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.ports import reserved_port
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
def free_port() -> Iterator[int]:
    """A loopback port nobody listens on, held for the test: no other test's server is given it."""
    with reserved_port() as port:
        yield port
