"""Holder identity through the whole daemon: a real holder moved into a real cgroup laid out as the kubelet
lays out a pod's container, with a fixture kubelet log directory naming the pod. Before the event, /status,
`status` and the holders-by-kind gauge name it; a real preemption drains it, and the signal's journal line,
the webhook's process, the drain's journal lines and the history (`history --json` and its words) name the pod
that lost its progress."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.daemon_harness import PREEMPTED, DaemonHarness
from tests.support.kubepods import KubepodsCgroup
from tests.support.waiting import wait_for
from tests.support.webhook_receiver import WebhookReceiver
from tests.support.workloads import OwnScanner, Workloads
from watchdog.daemon.status_text import render
from watchdog.fake.server import FakeMetadataServer
from watchdog.host.workload import KUBELET_PODS, POD_LOGS

REPO = Path(__file__).resolve().parents[2]
POD = "pod ml/trainer-0 container jax"


def history(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "watchdog", "history", "--state-dir", str(state_dir), *args],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip


def test_the_pod_of_a_holder_is_named_wherever_the_holder_is(
    fake: FakeMetadataServer, workloads: Workloads, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "tpu-watchdog")
    node = tmp_path / "node"
    with KubepodsCgroup() as cgroup, WebhookReceiver(statuses=[]) as receiver:
        (node / POD_LOGS / f"ml_trainer-0_{cgroup.pod_uid}").mkdir(parents=True)
        (node / KUBELET_PODS / cgroup.pod_uid / "containers" / "jax").mkdir(parents=True)
        child = workloads.start("default")  # SIGTERM at its default: it dies of it, saving nothing
        cgroup.enter(child.popen.pid)
        scanner = OwnScanner(workloads, node_root=str(node))
        state_dir = tmp_path / "state"
        harness = DaemonHarness(state_dir, fake, workloads, scanner=scanner, webhooks=(receiver.url,))
        with harness:
            harness.wait_metric("tpu_watchdog_device_holders_by_kind", 1, kind="pod")
            status = harness.daemon.view.status()
            (holder,) = status["holders"]
            assert holder["workload"]["pod_uid"] == cgroup.pod_uid
            assert (holder["workload"]["pod_name"], holder["workload"]["container_id"]) == (
                "trainer-0", cgroup.container_id,
            )  # fmt: skip
            assert f"pid {child.popen.pid} {holder['name']} [{POD}]:" in render(status)
            assert harness.metric("tpu_watchdog_device_holders_by_kind", kind="none") == 0
            fake.set(PREEMPTED, "TRUE")
            harness.wait_state("drained")
            wait_for(
                lambda: "drain_finished" in receiver.types(), what=f"drain_finished ({receiver.types()})"
            )
    finished = next(body for body in receiver.delivered() if body["type"] == "drain_finished")
    (proc,) = finished["processes"]
    assert (proc["pid"], proc["workload"]["pod_name"], proc["workload"]["kind"]) == (
        child.popen.pid, "trainer-0", "pod",
    )  # fmt: skip
    sent = next(r for r in caplog.records if getattr(r, "tpu_watchdog_kind", None) == "signal_sent")
    assert f"SIGTERM to pid {child.popen.pid} (" in sent.getMessage()
    assert f", {POD}): sent" in sent.getMessage()
    journal = sent.__dict__
    assert (journal["TPU_WATCHDOG_POD_NAME"], journal["TPU_WATCHDOG_POD_UID"]) == (
        "trainer-0",
        cgroup.pod_uid,
    )
    ended = [r.getMessage() for r in caplog.records if f" {child.popen.pid} " in r.getMessage()]
    assert any(f"[{POD}]" in line and "saved no checkpoint" in line for line in ended), ended
    listed = history(state_dir, "--json")
    assert listed.returncode == 0, listed.stderr
    (entry,) = json.loads(listed.stdout)
    (kept,) = entry["processes"]
    assert kept["workload"] == proc["workload"]
    words = history(state_dir)
    assert f"[{POD}]" in words.stdout, words.stdout
