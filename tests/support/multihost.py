"""The multi-host harness (watchdog/fake/hosts.py) for tests: each simulated host's device node a
`UniqueDevice` (numbers nothing else on the machine holds), released when the cluster stops, and the reasons
to skip (no root, no unshare, no JAX) in one place."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.waiting import wait_for
from tests.support.workloads import UniqueDevice
from watchdog.fake.hosts import Cluster, Job, SimulatedHost, missing

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


def readiness(hosts: Cluster, host: SimulatedHost) -> tuple[int, list[str | None]]:
    """`tpu-watchdog readiness --json` on `host` (in its namespaces): its exit status, each holder's SIGTERM.
    Asked fresh: the daemon's own view is from its last idle scan, which may predate the job's initialize."""
    argv = [sys.executable, "-m", "watchdog", "readiness", "--device", str(host.device), "--json"]
    done = host.inside(argv, 60, hosts.env)
    verdicts = json.loads(done.stdout) if done.stdout.strip() else []
    return done.returncode, [v["sigterm"] for v in verdicts]


def state_dir(host: SimulatedHost) -> Path:
    """The state directory `host`'s daemon runs with (fake/hosts.py): its history is there."""
    return host.directory / "state"


def history(hosts: Cluster, host: SimulatedHost) -> tuple[list[dict[str, Any]], str]:
    """`tpu-watchdog history` on `host` (in its namespaces, as an SRE there): (the `--json` list, newest
    first; the words)."""
    argv = [sys.executable, "-m", "watchdog", "history", "--state-dir", str(state_dir(host))]
    listed = host.inside([*argv, "--json"], 60, hosts.env)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    words = host.inside(argv, 60, hosts.env)
    assert words.returncode == 0, words.stdout + words.stderr
    entries: list[dict[str, Any]] = json.loads(listed.stdout)
    return entries, words.stdout


def finished_drains(hosts: Cluster, host: SimulatedHost, timeout: float) -> tuple[list[dict[str, Any]], str]:
    """`history` once its newest drain has ended (the daemon writes the end just after /status shows it)."""
    return wait_for(lambda: (h := history(hosts, host))[0] and h[0][0]["outcome"] and h, timeout,
                    interval=0.5, what="the drain's end in the history")  # fmt: skip
