"""A started fake on loopback port 0 and an HTTP session to it, both closed after each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from watchdog.fake.server import FakeMetadataServer


@pytest.fixture
def fake() -> Iterator[FakeMetadataServer]:
    with FakeMetadataServer(listen="127.0.0.1:0") as server:
        yield server


@pytest.fixture
def session() -> Iterator[requests.Session]:
    with requests.Session() as s:
        s.trust_env = False  # never through a proxy, as with the real metadata server
        yield s
