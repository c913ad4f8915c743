"""The device node the soak, the load benchmark and the crash scenarios share (`UniqueDevice` of
tests/support/workloads.py): numbers no other process holds or can open, found by the real scanner like
/dev/accel0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.workloads import CLAIMS, HOLD_FLAGS, UniqueDevice
from watchdog.host.holders import HolderScanner


def test_two_nodes_never_share_numbers_and_a_released_number_is_unclaimed(tmp_path: Path) -> None:
    with UniqueDevice(tmp_path, "a") as a, UniqueDevice(tmp_path, "b") as b:
        assert a.rdev != b.rdev
        assert os.stat(a.path).st_rdev == a.rdev
        claim = CLAIMS / f"{os.major(a.rdev)}-{os.minor(a.rdev)}"
        assert claim.exists()
    assert not claim.exists()


def test_nothing_can_open_it_but_a_holder_with_o_path_is_found_by_path_and_by_number(tmp_path: Path) -> None:
    with UniqueDevice(tmp_path) as node:
        with pytest.raises(OSError, match="No such device"):
            os.open(node.path, os.O_RDONLY)
        other = tmp_path / "elsewhere"  # the same numbers under another path: a container's own /dev
        os.mknod(other, 0o20600, node.rdev)
        code = (
            f"import os, sys; os.open({str(other)!r}, {HOLD_FLAGS}); print(os.getpid(), flush=True); input()"
        )
        with subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        ) as child:
            assert child.stdout is not None
            pid = int(child.stdout.readline())
            found = HolderScanner(patterns=[str(node.path)]).scan().holders
            child.kill()
        assert [h.identity.pid for h in found] == [pid]
