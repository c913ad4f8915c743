"""The multi-host harness (watchdog/fake/hosts.py) for tests: each simulated host's device node a
`UniqueDevice` (numbers nothing else on the machine holds), released when the cluster stops, and the reasons
to skip (no root, no unshare, no JAX) in one place."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from tests.support.workloads import UniqueDevice
from watchdog.fake.hosts import Cluster, Job, missing

needs_hosts = pytest.mark.skipif(missing() is not None, reason=str(missing()))
ON = {"maintenance": ("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE"),
      "preempted": ("instance/preempted", "TRUE")}  # fmt: skip


@contextmanager
def started(work: Path, job: Job, config: str = "") -> Iterator[Cluster]:
    """`job` on its simulated hosts, every daemon watching its holder; all stopped, every number freed."""
    with ExitStack() as stack:

        def make_device(directory: Path) -> Path:
            return stack.enter_context(UniqueDevice(directory)).path

        hosts = stack.enter_context(Cluster(work, job, make_device, config))
        try:
            hosts.start().wait_watching()
        except (RuntimeError, TimeoutError) as error:
            raise AssertionError(f"{error}\n{hosts.logs()}") from error
        yield hosts


def announce(hosts: Cluster, index: int, kind: str) -> None:
    """Maintenance (TERMINATE) or a preemption on host `index`'s metadata server."""
    path, value = ON[kind]
    hosts.hosts[index].fake.set(path, value)
