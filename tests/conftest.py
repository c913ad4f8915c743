"""Fixtures shared by the tests that run a daemon: a fake metadata server, and workloads on a device node."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.workloads import Workloads
from watchdog.fake.server import FakeMetadataServer


@pytest.fixture
def fake() -> Iterator[FakeMetadataServer]:
    """A started fake metadata server on a loopback port of its own."""
    with FakeMetadataServer(listen="127.0.0.1:0") as server:
        yield server


@pytest.fixture
def workloads(tmp_path: Path) -> Iterator[Workloads]:
    """Child processes holding a real device node in tmp_path/dev; all killed and reaped afterwards."""
    devices = tmp_path / "dev"
    devices.mkdir()
    loads = Workloads(devices)
    yield loads
    loads.close()


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """Where a test's daemon keeps its state file (created by the daemon)."""
    return tmp_path / "state"
