"""The facts `holders` reports beyond the scan (user, start time, children), read from real processes: a job
in its own session with a forked child, processes of other users, one gone since the scan; and from a fixture
tree, whose missing lists of children are read through psutil's PROCFS_PATH."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.proctree import BOOT_TIME, ProcTree
from tests.support.workloads import OwnScanner, Workloads
from watchdog.core.process import Holder, ProcessIdentity
from watchdog.host.facts import holder_facts
from watchdog.host.procfs import start_time


def boot_time() -> float:
    with open("/proc/stat") as handle:
        return next(float(line.split()[1]) for line in handle if line.startswith("btime"))


def holders_of(workloads: Workloads) -> dict[int, Holder]:
    return {h.pid: h for h in OwnScanner(workloads).scan().holders}


def test_a_job_in_its_own_session_and_its_forked_child(workloads: Workloads) -> None:
    before = time.time()
    job = workloads.start("fork", new_session=True)
    assert job.grandchild is not None
    found = holders_of(workloads)
    assert set(found) == {job.identity.pid, job.grandchild.pid}
    facts = holder_facts(found.values())
    parent, child = facts[job.identity], facts[job.grandchild]
    assert parent.children == (job.grandchild.pid,)
    assert child.children == ()
    assert parent.user == child.user == "root"
    # Start times: the kernel's boot second plus the start tick, the same instant the identity names.
    ticks = os.sysconf("SC_CLK_TCK")
    assert parent.create_time == pytest.approx(boot_time() + job.identity.start_time / ticks, abs=0.011)
    assert child.create_time == pytest.approx(boot_time() + job.grandchild.start_time / ticks, abs=0.011)
    assert parent.create_time is not None
    assert before - 1.5 <= parent.create_time <= time.time() + 1.5  # btime is a whole second
    assert found[job.grandchild.pid].ppid == job.identity.pid  # the scan's parent: the same relation


@pytest.fixture
def held_fd(workloads: Workloads) -> Iterator[int]:
    fd = os.open(workloads.device, os.O_RDONLY)
    yield fd
    os.close(fd)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start processes as other users")
@pytest.mark.parametrize(("uid", "user"), [(65534, "nobody"), (4242424, "4242424")])
def test_the_user_is_the_login_name_or_the_uid(
    workloads: Workloads, held_fd: int, uid: int, user: str
) -> None:
    """A process of another user, holding the node through an fd it inherited (it could not open it). `cat`
    waits on its stdin; the venv's python may sit where another user cannot run it."""
    proc = subprocess.Popen(["cat"], stdin=subprocess.PIPE, pass_fds=(held_fd,), user=uid, group=uid)
    try:
        start = start_time(proc.pid)
        assert start is not None
        holder = Holder(ProcessIdentity(proc.pid, start), "cat", (), uid, (str(workloads.device),))
        assert holder_facts([holder])[holder.identity].user == user
    finally:
        proc.kill()
        proc.wait(timeout=20)
        assert proc.stdin is not None
        proc.stdin.close()


def test_a_holder_gone_since_the_scan_or_a_reused_pid_is_left_out(workloads: Workloads) -> None:
    job = workloads.start("handled")
    holder = holders_of(workloads)[job.identity.pid]
    other = Holder(ProcessIdentity(holder.pid, holder.identity.start_time - 1), "x", (), 0, ())
    assert set(holder_facts([holder, other])) == {holder.identity}  # a PID now naming another process: out
    job.popen.kill()
    job.popen.wait(timeout=20)
    assert holder_facts([holder]) == {}


FIXTURE_FACTS = """
import json, sys
import psutil
from watchdog.core.process import Holder, ProcessIdentity
from watchdog.host.facts import holder_facts
holders = [Holder(ProcessIdentity(4000, 1000), "launcher", (), 0, ()),
           Holder(ProcessIdentity(4001, 2500), "worker", (), 4242424, ())]
facts = holder_facts(holders, sys.argv[1])
json.dump({"facts": [facts[h.identity].__dict__ for h in holders], "after": psutil.PROCFS_PATH}, sys.stdout)
"""


def test_a_fixture_tree_is_read_through_psutil_and_the_setting_restored(tmp_path: Path) -> None:
    """In a process of its own, as `holders --proc-root` runs: psutil 5.9 keeps the first boot time it
    reads for good, so one process must not mix two proc roots."""
    tree = ProcTree(tmp_path / "proc")
    tree.add(4000, "launcher", start_time=1000)
    tree.add(4001, "worker", ppid=4000, uid=4242424, start_time=2500)
    done = subprocess.run(
        [sys.executable, "-c", FIXTURE_FACTS, str(tmp_path / "proc")],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    answer = json.loads(done.stdout)
    ticks = os.sysconf("SC_CLK_TCK")
    launcher, worker = answer["facts"]
    assert (launcher["user"], launcher["children"]) == ("root", [4001])  # no task/ lists: psutil's children
    assert (worker["user"], worker["children"]) == ("4242424", [])
    assert launcher["create_time"] == pytest.approx(BOOT_TIME + 1000 / ticks)
    assert worker["create_time"] == pytest.approx(BOOT_TIME + 2500 / ticks)
    assert answer["after"] == "/proc"


NO_PSUTIL = """
import json, os, sys
from watchdog.core.process import Holder, ProcessIdentity
from watchdog.host.facts import holder_facts
from watchdog.host.procfs import start_time
me = ProcessIdentity(os.getpid(), start_time(os.getpid()))
facts = holder_facts([Holder(me, "python", (), os.getuid(), ())])
json.dump({"children": facts[me].children, "psutil": "psutil" in sys.modules}, sys.stdout)
"""


def test_psutil_is_not_imported_where_the_kernel_lists_children() -> None:
    """Its import costs ~40 ms, a quarter of a `holders` run on a busy host."""
    done = subprocess.run(
        [sys.executable, "-c", NO_PSUTIL], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == {"children": [], "psutil": False}
