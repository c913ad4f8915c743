"""Multi-host and Multislice, end to end: ONE multi-process JAX + Orbax job (examples/multihost_trainer.py,
on CPU), a process per simulated TPU host, each host its own PID namespace with its own /proc, fake
metadata server, device node and `tpu-watchdog run` (watchdog/fake/hosts.py). Maintenance on some hosts:
only their daemons signal; JAX's coordination service carries the notice to the whole job, every process
saves the same step (off the save interval) and exits 0; the other daemons see their holders leave on
their own and signal nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.multihost import announce, history, needs_hosts, readiness, started
from tests.support.waiting import wait_for
from watchdog.fake.hosts import Cluster, Job, SimulatedHost

SAVE_INTERVAL = 1000  # far from any step the job reaches in these tests: a save there is the sync point's
CONFIG = "[drain]\nmaintenance_grace = 60\npreemption_grace = 60\n"  # the job must not need the deadline
EXIT_WITHIN = 90.0  # s from the event to every process's exit: measured ~3 s (bench/bench_multihost.py)

pytestmark = [pytest.mark.slow, needs_hosts]


def saved_the_same_off_interval_step(hosts: Cluster) -> int:
    exits = hosts.wait_exited(EXIT_WITHIN)
    logs = hosts.logs()
    assert [e.get("code") for e in exits] == [0] * len(exits), logs
    reports = hosts.reports()
    assert all(r is not None and r["outcome"] == "preempted" for r in reports), (reports, logs)
    steps = {r["step"] for r in reports if r is not None}
    assert len(steps) == 1, (reports, logs)  # one sync step for the whole job
    step = steps.pop()
    assert step % SAVE_INTERVAL != 0  # saved because of the event, not on schedule
    assert all(step in r["saved_steps"] for r in reports if r is not None)
    return step


def drained(host: SimulatedHost) -> dict[str, Any]:
    """The host's last drain, once it ended: its holder SIGTERMed once, gone by exit, never SIGKILLed."""
    status = wait_for(
        lambda: (s := host.status()) is not None and s["last_drain"] is not None and s, 30, what="the drain"
    )
    record = status["last_drain"]  # its history entry
    assert record["outcome"] == "exited", record
    [process] = record["processes"]
    assert process["signals"] == ["SIGTERM"], process
    assert process["end"] == "exited", process  # exited, not killed (a release would say "released")
    # The journal line follows /status's last_drain by the history's write (an fsync): waited for.
    said = "drain exited, started"
    wait_for(lambda: said in host.daemon_log.read_text(), 30, interval=0.1, what="its line")
    return record


def left_on_its_own(hosts: Cluster, host: SimulatedHost) -> None:
    """A host without an event: no drain (none in its history either), no signal, and the record that its
    holder left on its own."""
    wait_for(lambda: "tpu_watchdog_holders_left_total 1.0" in host.metrics(), 15, what="the departure")
    metrics = host.metrics()
    assert 'tpu_watchdog_signals_sent_total{signal="SIGTERM"} 0.0' in metrics
    assert 'tpu_watchdog_signals_sent_total{signal="SIGKILL"} 0.0' in metrics
    assert "tpu_watchdog_device_holders 0.0" in metrics
    status = host.status()
    assert status is not None
    assert (status["state"], status["last_drain"], status["holders"]) == ("idle", None, [])
    assert "left on its own" in host.daemon_log.read_text()
    entries, words = history(hosts, host)
    assert entries == [], entries  # no drain on this host: its job's end is another host's event
    assert "no drain" in words, words


def test_maintenance_on_one_of_two_hosts_saves_the_whole_job(tmp_path: Path) -> None:
    """(a) TERMINATE on host 1 only: both processes save the same step and exit 0; host 1's drain ends
    exited; host 0's daemon signals nothing and records that its holder left on its own."""
    with started(tmp_path, Job(hosts=2, save_interval=SAVE_INTERVAL), CONFIG) as hosts:
        for host in hosts.hosts:  # after jax.distributed.initialize, JAX's notifier catches SIGTERM
            assert readiness(hosts, host) == (0, ["caught"]), host.name
        announce(hosts, 1, "maintenance")
        saved_the_same_off_interval_step(hosts)
        drained(hosts.hosts[1])
        left_on_its_own(hosts, hosts.hosts[0])


def test_maintenance_on_one_slice_of_two_saves_every_process(tmp_path: Path) -> None:
    """(b) Multislice-shaped, 2 slices x 2 hosts: slice 0's two hosts (process 0, the coordinator, and
    process 1) get TERMINATE and a preemption a fraction of a second apart: all 4 processes save the same
    step and exit 0; only slice 0's daemons signal."""
    job = Job(hosts=4, slices=2, save_interval=SAVE_INTERVAL)
    with started(tmp_path, job, CONFIG) as hosts:
        instances = set()
        for index, host in enumerate(hosts.hosts):  # each daemon knows its slice (tpu-env on its fake)
            known = wait_for(lambda h=host: (s := h.status()) and s["host"].get("num_slices") and s["host"],
                             30, what=f"{host.name}'s identity")  # fmt: skip
            assert (known["tpu_node"], known["slice_id"]) == (f"fake-slice-{index // 2}", str(index // 2))
            assert known["slice_hosts"] == 2, known  # worker-network-endpoints: the slice's two hosts
            assert known["multislice_coordinator"] == hosts.coordinator  # the job's, on every host
            instances.add(known["instance_id"])
        assert len(instances) == 4  # four VMs
        announce(hosts, 0, "maintenance")
        first = hosts.hosts[0].daemon_log
        wait_for(lambda: "SIGTERM to pid" in first.read_text(), 10, what="host 0's SIGTERM")  # then host 1
        announce(hosts, 1, "preempted")
        saved_the_same_off_interval_step(hosts)
        for host in hosts.hosts[:2]:
            drained(host)
        for host in hosts.hosts[2:]:
            left_on_its_own(hosts, host)
