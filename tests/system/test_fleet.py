"""The fleet view, end to end: 50 daemons (one per simulated TPU VM, each with its own fake metadata server,
device node, state directory and training process), one real Prometheus scraping them all every second with
the packaged rules loaded, and a maintenance wave across 7 hosts of one slice of a Multislice job. Each host
learns which TPU node (slice) and Multislice job it belongs to from its metadata server (tpu-env), as a real
TPU VM does. The recorded series must name exactly those 7 hosts (by instance_id), count them on their own
slice only (not on the other slice of the same type and zone), count them once on their job, and let them go
when the wave ends.

The daemons run in this process (the real Daemon, watches over loopback HTTP, the real HTTP surface); each
scans /proc with tests.support.workloads.OwnScanner, so it can only ever signal the processes this test
started, and reads only its own host's entries there (host_only: a VM's /proc holds its own processes, not
the 50 hosts' and the rest of the test run's).
"""

from __future__ import annotations

import dataclasses
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon_harness import FAST, MAINTENANCE, harness_config
from tests.support.prometheus_server import PrometheusServer
from tests.support.readable import readable
from tests.support.waiting import wait_for
from tests.support.workloads import Child, OwnScanner, Workloads
from watchdog.core.identity import TPU_ENV
from watchdog.core.stop import Stop
from watchdog.daemon.compose import Wiring, build_daemon
from watchdog.daemon.loop import Daemon
from watchdog.fake.server import FakeMetadataServer
from watchdog.fake.vm_identity import TpuIdentity
from watchdog.metadata.backoff import WatchBackoff
from watchdog.metadata.transport import MetadataTransport
from watchdog.surface.httpapi import HttpSurface
from watchdog.surface.notify import Notifier

REPO = Path(__file__).resolve().parents[2]
RULES = [
    REPO / "packaging" / "prometheus" / "tpu-watchdog.rules.yml",
    REPO / "packaging" / "prometheus" / "tpu-watchdog-fleet.rules.yml",
]
PROJECT = "123456789012"
# A Multislice job of two 16-host v5p-128 slices (4 chips per VM) in one zone, and 18 single-host v4-8 VMs
# (each a node of its own; the last 3 on an image without tpu-env: their node is unknown): 50 daemons.
V5P = ("v5p-128", "us-east5-a")
V4 = ("v4-8", "us-central2-b")
SLICES = ("train-a", "train-b")
COORDINATOR = "10.130.0.2:8476"
OLD_IMAGES = 3
WAVE_NODE = "train-b"
WAVE_WORKERS = range(9, 16)  # 7 hosts of its second slice
HANG_SEC = 10  # hanging-GET timeout: long enough that 150 idle watches cost little CPU here
# The first sample comes 5-6 s after Prometheus starts. 50 targets in one process, beside three other test
# workers on 2 cores: scrapes with a 1 s timeout missed now and then, and a missed scrape makes that host's
# series stale at once (two hosts of the wave vanished between a wait and the query after it). So: 2 s
# scrapes, and every assertion is made on the very answer its wait accepted.
SCRAPE_SECONDS = 2
PROMETHEUS_WITHIN = 60.0
WITHIN = 30.0  # for the daemons' own states: 50 of them share this process (one GIL) and 2 busy cores

needs_prometheus = pytest.mark.skipif(
    shutil.which("prometheus") is None,
    reason="prometheus missing: `apt-get install --no-install-recommends prometheus` (make installs it)",
)
pytestmark = [needs_prometheus, pytest.mark.slow]


@dataclasses.dataclass
class Host:
    """One simulated TPU VM: its metadata server, its training process, its daemon and that daemon's HTTP."""

    instance_id: str
    accelerator_type: str
    zone: str
    node: str  # "" for a host whose image has no tpu-env
    worker_id: int
    fake: FakeMetadataServer
    workloads: Workloads
    trainer: Child
    stop: threading.Event
    transport: MetadataTransport
    daemon: Daemon
    thread: threading.Thread
    http: HttpSurface

    @property
    def slice(self) -> str:
        """Its slice as the rules group it: the TPU node, or "type/zone" when its image does not say."""
        return self.node or f"{self.accelerator_type}/{self.zone}"

    @property
    def state(self) -> str:
        return self.daemon.lifecycle.state.value


def start_host(root: Path, index: int, identity: TpuIdentity, has_env: bool = True) -> Host:
    instance_id = str(7_100_000_000_000_000_000 + index)
    directory = root / f"host-{index:02d}"
    (directory / "dev").mkdir(parents=True)
    fake = FakeMetadataServer(listen="127.0.0.1:0").start()
    fake.set_identity(dataclasses.replace(identity, instance_id=instance_id))
    if not has_env:
        fake.delete(TPU_ENV)
    workloads = Workloads(directory / "dev")
    try:
        trainer = workloads.start("gate")  # on SIGTERM says "term"; exits 0 once the test opens its gate
    except BaseException:
        workloads.close()
        fake.stop()
        raise
    config = harness_config(directory / "state", workloads, maintenance_grace=300.0)
    stop = Stop()
    wiring = Wiring(
        metadata_host=fake.address, timeout_sec=HANG_SEC, timing=FAST,
        backoff=lambda: WatchBackoff.uniform(initial=0.05, cap=0.5),
        scanner=OwnScanner(workloads, host_only=True), notifier=Notifier(environ={}),
    )  # fmt: skip
    built = build_daemon(config, stop, wiring)  # host_info on: the daemon asks its metadata server
    daemon, transport = built.daemon, built.transport
    http = HttpSurface("127.0.0.1:0", daemon.view)
    http.start()
    thread = threading.Thread(target=daemon.run, name=f"daemon {index}", daemon=True)
    thread.start()
    return Host(
        instance_id, identity.accelerator_type, identity.zone, identity.node if has_env else "",
        identity.worker, fake, workloads, trainer, stop, transport, daemon, thread, http,
    )  # fmt: skip


def stop_host(host: Host) -> bool:
    """Stop one host, everything it started; True if its daemon stopped within 10 s."""
    host.stop.set()  # also closes its watches' sockets
    host.thread.join(timeout=10)
    host.http.stop()
    host.transport.close()
    host.fake.stop()
    host.workloads.close()
    return not host.thread.is_alive()


def stop_hosts(hosts: list[Host]) -> None:
    """All hosts at once: each stop waits out a server poll interval or a grace of about 0.5 s."""
    for host in hosts:
        host.stop.set()
    with ThreadPoolExecutor(max_workers=len(hosts) or 1) as pool:
        stopped = list(pool.map(stop_host, hosts))
    stuck = [host.instance_id for host, ok in zip(hosts, stopped, strict=True) if not ok]
    assert not stuck, f"daemons that did not stop within 10 s: {stuck}"


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[list[Host]]:
    hosts: list[Host] = []
    try:
        for slice_id, node in enumerate(SLICES):
            for worker in range(16):
                identity = TpuIdentity(
                    V5P[0], node, worker, hosts=16, zone=V5P[1], slice_id=slice_id, num_slices=len(SLICES),
                    coordinator=COORDINATOR,
                )  # fmt: skip
                hosts.append(start_host(tmp_path, len(hosts), identity))
        for vm in range(18):
            identity = TpuIdentity(V4[0], f"v4-vm-{vm}", zone=V4[1])
            hosts.append(start_host(tmp_path, len(hosts), identity, has_env=vm < 18 - OLD_IMAGES))
        wait_for(
            lambda: all(
                len(h.daemon.view.values) == 3 and h.daemon.view.identity.instance_id == h.instance_id
                for h in hosts
            ),
            timeout=30,
            what="every daemon: each watched key answered and its host facts read",
        )
        yield hosts
    finally:
        stop_hosts(hosts)


@pytest.fixture
def prometheus(fleet: list[Host], tmp_path: Path) -> Iterator[PrometheusServer]:
    targets = [host.http.address for host in fleet]
    server = PrometheusServer(tmp_path / "prometheus", targets, RULES, scrape_seconds=SCRAPE_SECONDS)
    try:
        yield server
    finally:
        server.stop()


def answer_when(
    prometheus: PrometheusServer, promql: str, accept: Callable[[list[dict[str, Any]]], bool], what: str
) -> list[dict[str, Any]]:
    """The first answer to `promql` that `accept` takes (a later query could see a missed scrape)."""

    def accepted() -> list[dict[str, Any]] | None:
        result = prometheus.query(promql)
        return result if accept(result) else None

    found: list[dict[str, Any]] = wait_for(accepted, timeout=PROMETHEUS_WITHIN, interval=0.2, what=what)
    return found


def instance_ids(result: list[dict[str, Any]]) -> set[str]:
    return {series["metric"]["instance_id"] for series in result}


def by_slice(result: list[dict[str, Any]]) -> dict[str, float]:
    """Recorded series by their slice, spelled as `Host.slice`."""
    found = {}
    for series in result:
        labels = series["metric"]
        name = labels.get("tpu_node") or f"{labels['accelerator_type']}/{labels['zone']}"
        found[name] = float(series["value"][1])
    return found


def slices(fleet: list[Host], counts: dict[str, float] | None = None) -> dict[str, float]:
    """Every slice of the fleet with 0 hosts, but those in `counts`."""
    every = {host.slice: 0.0 for host in fleet}
    return {**every, **(counts or {})}


def said_nothing(child: Child) -> bool:
    """True if the child has written nothing on its report pipe (a "gate" child writes only on SIGTERM)."""
    return not readable([child.out])


def test_a_maintenance_wave_is_reported_for_exactly_the_hosts_it_hit(
    fleet: list[Host], prometheus: PrometheusServer
) -> None:
    started = time.time()
    everyone = {host.instance_id for host in fleet}
    wave = [host for host in fleet if host.node == WAVE_NODE and host.worker_id in WAVE_WORKERS]
    assert len(wave) == 7
    spared = [host for host in fleet if host not in wave]

    # Before: every host scraped with its host facts, both slices recorded with nobody draining.
    wait_for(
        lambda: instance_ids(prometheus.query('tpu_watchdog_host_info{job="tpu-watchdog"}')) == everyone,
        timeout=PROMETHEUS_WITHIN, interval=0.2, what="all 50 hosts scraped with their host_info",
    )  # fmt: skip
    wait_for(
        lambda: by_slice(prometheus.query("slice:tpu_watchdog_hosts_draining:sum")) == slices(fleet),
        timeout=PROMETHEUS_WITHIN, interval=0.2, what="the slice rules evaluated on all hosts, none draining",
    )  # fmt: skip
    assert len(slices(fleet)) == 2 + (18 - OLD_IMAGES) + 1  # two v5p nodes, 15 v4 nodes, the unknown ones
    assert prometheus.query("instance:tpu_watchdog_draining:host_info") == []
    sizes = slices(fleet)
    for host in fleet:
        sizes[host.slice] += 1
    per_slice = 'count by (tpu_node, accelerator_type, zone) (tpu_watchdog_host_info{job="tpu-watchdog"})'
    answer_when(
        prometheus, per_slice, lambda result: by_slice(result) == sizes, what="every slice counted whole"
    )
    assert (sizes["train-a"], sizes["train-b"], sizes[f"{V4[0]}/{V4[1]}"]) == (16, 16, OLD_IMAGES)
    job = f'multislice:tpu_watchdog_hosts_draining:sum{{multislice_coordinator="{COORDINATOR}"}}'
    assert [float(s["value"][1]) for s in prometheus.query(job)] == [0.0]

    # The wave: maintenance on 7 hosts of the v5p slice. Each of their trainers gets SIGTERM.
    for host in wave:
        host.fake.set(MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE")
    for host in wave:
        host.trainer.expect("term")
    wait_for(lambda: all(h.state == "draining" for h in wave), timeout=WITHIN, what="the wave draining")

    # The per-host recorded series name exactly the wave; the slice series count it on its slice only.
    hit = {host.instance_id for host in wave}
    draining = answer_when(
        prometheus, "instance:tpu_watchdog_draining:host_info", lambda result: instance_ids(result) == hit,
        what="instance:tpu_watchdog_draining:host_info == the wave",
    )  # fmt: skip
    assert {(s["metric"]["tpu_node"], s["metric"]["slice_id"]) for s in draining} == {(WAVE_NODE, "1")}
    assert {s["metric"]["multislice_coordinator"] for s in draining} == {COORDINATOR}
    assert sorted(int(s["metric"]["worker_id"]) for s in draining) == list(WAVE_WORKERS)
    wait_for(
        lambda: by_slice(prometheus.query("slice:tpu_watchdog_hosts_draining:sum"))
        == slices(fleet, {WAVE_NODE: 7.0}),
        timeout=PROMETHEUS_WITHIN, interval=0.2, what="7 draining on their own slice only, not its twin",
    )  # fmt: skip
    left = "slice:tpu_watchdog_drain_deadline_seconds_left:min"
    deadline_left = by_slice(answer_when(prometheus, left, bool, what="a slice's drain deadline recorded"))
    assert set(deadline_left) == {WAVE_NODE}
    assert 0 < deadline_left[WAVE_NODE] <= 300
    wait_for(
        lambda: [float(s["value"][1]) for s in prometheus.query(job)] == [7.0],
        timeout=PROMETHEUS_WITHIN, interval=0.2, what="7 draining on the Multislice job",
    )  # fmt: skip
    job_slices = prometheus.query("multislice:tpu_watchdog_slices_draining:count")
    assert [(s["metric"]["multislice_coordinator"], float(s["value"][1])) for s in job_slices] == [
        (COORDINATOR, 1.0)
    ]
    sigterms = 'sum(tpu_watchdog_signals_sent_total{job="tpu-watchdog", signal="SIGTERM"})'
    wait_for(
        lambda: [float(s["value"][1]) for s in prometheus.query(sigterms)] == [7.0],
        timeout=PROMETHEUS_WITHIN, interval=0.2, what="7 SIGTERMs counted across the fleet",
    )  # fmt: skip
    assert all(host.state == "idle" for host in spared)
    assert all(said_nothing(host.trainer) for host in spared), "a host outside the wave signalled its trainer"

    # The wave ends: the trainers checkpoint and exit; the hosts leave the per-host series and the count.
    for host in wave:
        host.trainer.open_gate()
    # 50 daemons share this process and its 2 cores: on a busy machine the wave takes longer than 10 s.
    wait_for(
        lambda: all(h.state == "drained" for h in wave), timeout=60, what="every host of the wave drained"
    )
    wait_for(
        lambda: by_slice(prometheus.query("slice:tpu_watchdog_hosts_draining:sum")) == slices(fleet),
        timeout=PROMETHEUS_WITHIN, interval=0.2, what="the slice count back to 0 after the wave",
    )  # fmt: skip
    wait_for(
        lambda: prometheus.query("instance:tpu_watchdog_draining:host_info") == [],
        timeout=PROMETHEUS_WITHIN, interval=0.2, what="no host draining after the wave",
    )  # fmt: skip
    assert prometheus.query("instance:tpu_watchdog_timed_out:host_info") == []

    # Over the whole test, no host outside the wave was ever recorded as draining.
    window = f"{int(time.time() - started) + 5}s"
    ever = prometheus.query(
        f"count by (instance_id) (count_over_time(instance:tpu_watchdog_draining:host_info[{window}]))"
    )
    assert instance_ids(ever) == hit
    failing = [
        (r["name"], r.get("lastError"))
        for g in prometheus.rules()
        for r in g["rules"]
        if r["health"] == "err"
    ]
    assert failing == []
