"""Fixtures shared by the tests that run a daemon: a fake metadata server, and workloads on a device node.

Also the order the suite runs in. `make test` runs it on several workers (pytest-xdist, `--dist loadgroup`:
each test goes to the next free worker, a group to one worker: tests/support/scheduling.py). The scenario
tests that take tens of seconds are collected first (RUN_FIRST), so that they start early and the run does
not end with one of them still going while the other workers have nothing left to do (docs/benchmarks.md,
"make test").
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests.support.workloads import Workloads
from watchdog.fake.server import FakeMetadataServer

# Hypothesis's deadline per example (200 ms) and its too-slow health check time the machine, not the code:
# on 2 shared cores, with the other workers of the run busy, parsing a few bytes has taken 268 ms. What an
# example does is the test; how long it takes is no promise of the code (bench/ measures what is).
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

# Node id prefixes of the tests that go first, in this order (measured on 2 shared cores; every prefix must
# still name a test, tests/test_conftest.py checks: a renamed module would otherwise lose its place).
# The soak starts at once: it is the longest (60 s by design) and mostly waits, as do the other long ones (on
# deadlines, back-offs, a server that is down): alone together they left the cores three-quarters idle for
# the soak's minute. So beside it go the ones that mostly compute (JAX, containers, a .deb build and dpkg,
# 50 daemons, 500 holders), the long waits among them, then the rest.
RUN_FIRST = (
    "tests/system/test_soak.py::",
    "tests/system/test_multihost.py::",  # 2 and 4 JAX processes, a PID namespace and a daemon each
    "tests/system/systemd/test_nspawn.py::",  # one group: the booted container is a module fixture
    "tests/system/packaging/test_deb.py::",  # one group: the build and the container are module fixtures
    "tests/system/test_daemon_faults.py::test_metadata_server_down_for_30_s",  # 30 s by design
    "tests/system/test_multihost_lossy.py::",  # with test_e2e_jax.py and test_demo.py: one group
    "tests/system/test_fleet.py::",  # 50 daemons and a Prometheus
    # 20 s by design: a metadata server outage deep into the old backoff's curve
    "tests/metadata/test_watch.py::test_a_value_changed_during_a_long_outage_is_delivered_within_2_s_of_the_return",
    "tests/system/test_load.py::",  # 500 holders
    "tests/system/test_crash_restart.py::test_kill_9_at_a_random_point_of_a_drain_keeps_every_promise",
    "tests/system/test_maxtext.py::",  # minutes: MaxText's imports and compiling, three times over
    "tests/system/test_pax.py::",  # the same for Pax (TensorFlow's and lingvo's imports too)
    "tests/system/test_e2e_jax.py::",  # JAX's import alone is seconds of CPU
    "tests/system/test_metrics_scrape.py::",
    "tests/system/test_daemon_faults.py::",
    "tests/system/test_one_sigterm.py::",
    "tests/system/test_daemon_restart.py::",
    "tests/daemon/",
    "tests/system/",
)
# Modules whose module-scoped fixtures are expensive (a .deb build, a booted container): run on one worker,
# so each is set up once. And the JAX jobs, on two workers, each running its share one after another
# (measured serially: 60 s and 60 s): all side by side, their 12 processes (~300 MB and seconds of CPU
# start-up each) would starve the 2 cores and each other; on one worker they would be 2 minutes of the run.
# A group is one unit of work for `--dist loadgroup`, where its first test is in the run order
# (tests/support/scheduling.py: the controller reads the groups from here, not from marks).
ONE_WORKER = {
    "tests/system/packaging/test_deb.py": "deb",
    "tests/system/systemd/test_nspawn.py": "nspawn",
    "tests/system/test_multihost.py": "jax-hosts",  # 2 and 4 processes
    "tests/system/test_multihost_lossy.py": "jax",
    "tests/system/test_e2e_jax.py": "jax",
    "tests/commands/test_demo.py": "jax",  # demo --multihost: 2 processes
}


def rank(nodeid: str) -> int:
    """Where a test goes: the index of the first RUN_FIRST prefix it has, after all of them if none."""
    ranks = (i for i, prefix in enumerate(RUN_FIRST) if nodeid.startswith(prefix))
    return next(ranks, len(RUN_FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: rank(item.nodeid))  # stable: the rest keep their collection order


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's, which a run with -p no:xdist lacks
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """--dist loadgroup with ONE_WORKER's groups, in the run order (tests/support/scheduling.py)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from tests.support.scheduling import GroupsByPath

    return GroupsByPath(config, log, ONE_WORKER)


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
