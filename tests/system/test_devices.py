"""A real daemon, a real event, real children: a node numbered like /dev/kmsg, /dev/random or /dev/fuse
under a broad pattern is never a TPU device (the real /sys says its class), so its holder is never
signalled while the job holding the watched node is drained; a pattern matching nothing is said at start,
in /status and in tpu_watchdog_devices."""

from __future__ import annotations

import dataclasses
import logging
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from tests.support.daemon_harness import MAINTENANCE, DaemonHarness
from tests.support.readable import readable
from tests.support.waiting import wait_for
from tests.support.workloads import TEST_NUMBER, Workloads
from watchdog.core.process import Holder
from watchdog.fake.server import FakeMetadataServer
from watchdog.host.holders import HolderScanner, ScanResult

KERNEL_NODES = {"kmsg": (1, 11), "random": (1, 8), "fuse": (10, 229)}
# Holds every path it is given; says "term" on SIGTERM (and keeps running), so a signal cannot go unseen.
HOLD = """
import os, signal, sys
fds = [os.open(path, os.O_RDONLY) for path in sys.argv[1:]]
signal.signal(signal.SIGTERM, lambda *_: print("term", flush=True))
print("ready", flush=True)
while True:
    signal.pause()
"""


class Narrowed:
    """The real scanner on a broad pattern, its holders narrowed to this test's processes (other runs on
    this machine hold /dev/full's numbers too)."""

    def __init__(self, inner: HolderScanner, pids: Callable[[], set[int]]) -> None:
        self.inner, self.pids = inner, pids

    def scan(self) -> ScanResult:
        result = self.inner.scan()
        return dataclasses.replace(result, holders=tuple(h for h in result.holders if h.pid in self.pids()))

    def recheck(self, holders: Sequence[Holder]) -> list[Holder]:
        return [h for h in self.inner.recheck(holders) if h.pid in self.pids()]


@pytest.fixture
def kernel_holder(workloads: Workloads) -> Iterator[subprocess.Popen[str]]:
    """A real process holding nodes numbered like the kernel's own devices, beside the test's device."""
    directory = workloads.device.parent
    paths = []
    for name, number in KERNEL_NODES.items():
        if os.path.exists(f"/sys/dev/char/{number[0]}:{number[1]}"):  # this kernel has the device
            os.mknod(directory / name, stat.S_IFCHR | 0o600, os.makedev(*number))
            paths.append(str(directory / name))
    proc = subprocess.Popen([sys.executable, "-c", HOLD, *paths], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    yield proc
    proc.kill()
    proc.wait(timeout=30)
    proc.stdout.close()


def test_holders_of_kernel_devices_under_a_broad_pattern_are_never_signalled_on_an_event(
    fake: FakeMetadataServer,
    workloads: Workloads,
    state_dir: Path,
    kernel_holder: subprocess.Popen[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="tpu-watchdog")
    job = workloads.start("handled")
    pattern = f"{workloads.device.parent}/*"
    ours = lambda: {job.identity.pid, kernel_holder.pid}  # noqa: E731 - the narrowing, read at each scan
    scanner = Narrowed(HolderScanner(patterns=[pattern], allow_numbers=[TEST_NUMBER]), ours)
    with DaemonHarness(state_dir, fake, workloads, scanner=scanner, devices=(pattern,)) as harness:
        fake.set(MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE")
        harness.wait_metric("tpu_watchdog_drains_total", 1, outcome="exited")
        devices = {Path(d["path"]).name: d for d in harness.daemon.view.status()["devices"]}
    assert harness.metric("tpu_watchdog_signals_sent_total", signal="SIGTERM") == 1  # the job's, only
    assert not job.alive()
    assert kernel_holder.poll() is None
    assert kernel_holder.stdout is not None
    assert not readable([kernel_holder.stdout]), "the holder of the kernel's nodes was signalled"
    assert (devices["accel0"]["verdict"], devices["accel0"]["watched"]) == ("allowed", True)
    refused = {name: (d["class"], d["watched"]) for name, d in devices.items() if name != "accel0"}
    expected = {"kmsg": "mem", "random": "mem", "fuse": "misc"}
    assert refused == {name: (expected[name], False) for name in refused}
    assert refused  # this kernel had at least /dev/kmsg's and /dev/random's
    said = caplog.text  # at start: the number opted in, and each refusal
    allowed = (
        f"watched by number: {workloads.device} (1:7): named in devices.allow_numbers (sysfs: class mem)"
    )
    assert allowed in said
    kmsg = workloads.device.parent / "kmsg"
    refusal = f"not a TPU device, never watched: {kmsg} (1:11): class mem: one of the kernel's own devices"
    assert refusal in said


def test_a_pattern_matching_nothing_is_said_at_start_shown_empty_and_counted_zero(
    fake: FakeMetadataServer,
    workloads: Workloads,
    state_dir: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="tpu-watchdog")
    nothing = str(tmp_path / "no-such-accel*")
    with DaemonHarness(state_dir, fake, workloads, devices=(nothing,)) as harness:
        said = lambda: [r for r in caplog.records if "no TPU device node matches" in r.getMessage()]  # noqa: E731
        wait_for(lambda: bool(said()), what="the warning that nothing is watched")
        status = harness.daemon.view.status()
        assert harness.metric("tpu_watchdog_devices") == 0
        assert harness.daemon.view.health() == (True, "ok")  # healthy otherwise: hence the alert
    (warning,) = said()
    assert warning.levelno == logging.WARNING
    assert nothing in warning.getMessage()
    assert warning.__dict__["MESSAGE_ID"] == "61ea0f33f61547908d1f107a91f91b56"
    assert status["devices"] == []
