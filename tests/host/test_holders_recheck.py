"""`HolderScanner.recheck`: the warm index re-checked from each process's own /proc entries, exactly; and
`HolderScanner.newcomers`: the processes the index has not seen, scanned alone."""

from __future__ import annotations

import dataclasses
import os
import signal

import pytest

from tests.support.workloads import TEST_NUMBER, OwnScanner, Workloads
from watchdog.core.process import ProcessIdentity
from watchdog.core.vocabulary import SigtermDisposition
from watchdog.host.holders import HolderScanner
from watchdog.host.procfs import FdDir


def test_a_holder_still_holding_is_kept_with_what_it_holds(workloads: Workloads) -> None:
    child = workloads.start("report")
    (indexed,) = OwnScanner(workloads).scan().holders
    (again,) = HolderScanner(patterns=[str(workloads.device)], allow_numbers=[TEST_NUMBER]).recheck([indexed])
    assert again.identity == child.identity
    assert again.devices == indexed.devices


def test_released_gone_and_reused_pids_are_dropped(workloads: Workloads) -> None:
    released, gone, kept = workloads.start("release"), workloads.start("report"), workloads.start("report")
    index = OwnScanner(workloads).scan().holders
    assert len(index) == 3
    released.popen.send_signal(signal.SIGTERM)  # closes the device, keeps running
    released.expect("released")
    gone.popen.kill()
    gone.popen.wait(timeout=10)
    stale = dataclasses.replace(  # the same PID, another start time: a process that reused it
        next(h for h in index if h.identity == kept.identity),
        identity=ProcessIdentity(kept.identity.pid, kept.identity.start_time + 1),
    )
    found = HolderScanner(patterns=[str(workloads.device)], allow_numbers=[TEST_NUMBER]).recheck(
        [*index, stale]
    )
    assert [h.identity for h in found] == [kept.identity]


def test_nothing_matching_the_patterns_means_nobody(workloads: Workloads) -> None:
    workloads.start("report")
    index = OwnScanner(workloads).scan().holders
    assert (
        HolderScanner(patterns=[str(workloads.device) + ".absent"], allow_numbers=[TEST_NUMBER]).recheck(
            index
        )
        == []
    )


def test_the_sigterm_disposition_is_read_again_not_taken_from_the_index(workloads: Workloads) -> None:
    """A job installs its handler as it starts, after the idle scan may have seen it: the drain keeps the
    disposition seen before its signal, so the re-check reads the one of now."""
    workloads.start("handled")
    (indexed,) = OwnScanner(workloads).scan().holders
    assert indexed.sigterm is SigtermDisposition.CAUGHT
    stale = dataclasses.replace(indexed, sigterm=SigtermDisposition.DEFAULT)  # as an earlier scan saw it
    (again,) = HolderScanner(patterns=[str(workloads.device)], allow_numbers=[TEST_NUMBER]).recheck([stale])
    assert again.sigterm is SigtermDisposition.CAUGHT


def test_newcomers_are_the_holders_among_the_pids_a_scan_had_not_seen(workloads: Workloads) -> None:
    old = workloads.start("report")
    scan = OwnScanner(workloads).scan()
    assert old.identity.pid in scan.pids
    new = workloads.start("report")  # a job started after that scan
    found = OwnScanner(workloads).newcomers(scan.pids)
    assert [h.identity for h in found] == [new.identity]  # the old holder is left to the full scan
    assert found[0].devices == (str(workloads.device),)


def test_a_re_check_reads_the_fds_the_index_saw_holding_and_no_others(
    workloads: Workloads, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job with thousands of fds is re-checked in a readlink or two: the fd it held the device by."""
    child = workloads.start("report")
    (indexed,) = OwnScanner(workloads).scan().holders
    (fd,) = indexed.fds
    assert os.readlink(f"/proc/{child.popen.pid}/fd/{fd}") == str(workloads.device)

    def every_fd(self: FdDir) -> list[tuple[str, str]]:
        raise AssertionError("read every fd of the holder")

    monkeypatch.setattr(FdDir, "links", every_fd)
    (again,) = HolderScanner(patterns=[str(workloads.device)], allow_numbers=[TEST_NUMBER]).recheck([indexed])
    assert (again.identity, again.devices, again.fds) == (child.identity, indexed.devices, indexed.fds)


def test_a_holder_that_holds_the_device_by_another_fd_now_is_found_by_reading_them_all(
    workloads: Workloads,
) -> None:
    workloads.start("report")
    (indexed,) = OwnScanner(workloads).scan().holders
    moved = dataclasses.replace(indexed, fds=("999",))  # as if it had closed that fd and opened another
    (again,) = HolderScanner(patterns=[str(workloads.device)], allow_numbers=[TEST_NUMBER]).recheck([moved])
    assert (again.identity, again.fds) == (indexed.identity, indexed.fds)
