"""A state directory that fills up or turns read-only mid-event: the daemon drains from memory and says so.

The directory is a real tmpfs of 256 KiB (we run as root), filled with a real file until ENOSPC, or remounted
read-only; the drain runs against a real holder process. Nothing here is simulated.
"""

from __future__ import annotations

import errno
import logging
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon_harness import PREEMPTED, DaemonHarness
from tests.support.waiting import wait_for
from tests.support.workloads import Workloads
from watchdog.fake.server import FakeMetadataServer

PERSISTED = "tpu_watchdog_state_persisted"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: needs root")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mountpoint = tmp_path / "state"
    mountpoint.mkdir(mode=0o700)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(mountpoint)], check=True
    )
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def fill(directory: Path) -> Path:
    """Write zeros until the file system says ENOSPC, in ever smaller pieces down to one byte."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (65536, 4096, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError as error:
                    if error.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return filler


def not_persisted(harness: DaemonHarness) -> None:
    wait_for(lambda: harness.metric(PERSISTED) == 0, what="tpu_watchdog_state_persisted 0")
    view = harness.daemon.view
    assert view.state_error is not None
    assert "STATE NOT PERSISTED" in view.summary()
    assert view.status()["state_file"]["persisted"] is False


@pytest.mark.parametrize("failure", ["disk-full", "read-only"])
def test_the_drain_goes_on_from_memory_and_says_so_loudly(
    fake: FakeMetadataServer,
    workloads: Workloads,
    small_disk: Path,
    caplog: pytest.LogCaptureFixture,
    failure: str,
) -> None:
    job = workloads.start("handled")
    with DaemonHarness(small_disk, fake, workloads) as harness, caplog.at_level(logging.WARNING):
        assert harness.metric(PERSISTED) == 1
        if failure == "disk-full":
            filler = fill(small_disk)
            expected = errno.ENOSPC
        else:
            subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
            expected = errno.EROFS
        fake.set(PREEMPTED, "TRUE")
        assert job.popen.wait(timeout=20) == 0  # SIGTERMed: its checkpoint is saved
        harness.wait_state("drained")
        not_persisted(harness)
        assert harness.daemon.store.write_error is not None
        assert harness.daemon.store.write_error.errno == expected
        assert harness.metric("tpu_watchdog_drains_total", outcome="exited") == 1
        # The loop logs just after it sets the metric not_persisted() waited for.
        wait_for(lambda: "STATE IS NOT PERSISTED" in caplog.text, what="the error in the log")
        # Space again (or writable again): the next change is written and the daemon says so.
        if failure == "disk-full":
            filler.unlink()
        else:
            subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
        fake.set(PREEMPTED, "FALSE")
        harness.wait_state("idle")
        wait_for(lambda: harness.metric(PERSISTED) == 1, what="persisted again")
        assert harness.daemon.view.state_error is None
        wait_for(lambda: "state is persisted again" in caplog.text, what="the all-clear in the log")
        assert harness.daemon.store.state.events == ()
