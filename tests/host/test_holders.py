"""The holder scan: on fixture /proc trees (exact cases) and on the real /proc with real children holding
real device nodes made with mknod."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.proctree import ProcTree
from watchdog.core.process import ProcessIdentity
from watchdog.host.holders import Excludes, HolderScanner, ScanResult, find_devices
from watchdog.host.procfs import PF_KTHREAD

# ---------------------------------------------------------------- fixture trees


@pytest.fixture(autouse=True)
def own_pids_out_of_the_trees(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scanner never reads its own PID or its parent's, taken from the real process; the trees here use
    small made-up PIDs (500, 704, ...), which the test process or its parent can really have (it happened:
    a pytest-xdist worker whose parent was PID 704). Made-up PIDs no tree uses stand in for them."""
    monkeypatch.setattr(os, "getpid", lambda: 4_000_001)
    monkeypatch.setattr(os, "getppid", lambda: 4_000_002)


@pytest.fixture
def devices(tmp_path: Path) -> Path:
    """A device dir with accel0 and accel1 (plain files: fixture scans match them by path)."""
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("accel0", "accel1"):
        (dev / name).write_text("")
    return dev


def scan(
    tmp_path: Path, dev: Path, excludes: Excludes | None = None, extra: tuple[str, ...] = ()
) -> ScanResult:
    scanner = HolderScanner(
        patterns=(f"{dev}/accel*",), extra_paths=extra, excludes=excludes, proc_root=str(tmp_path / "proc")
    )
    return scanner.scan()


def test_holder_carries_identity_name_cmdline_uid_devices_cgroup(tmp_path: Path, devices: Path) -> None:
    tree = ProcTree(tmp_path / "proc")
    tree.add(
        500,
        "a) (b",
        ppid=42,
        start_time=987654,
        uid=1000,
        cmdline=("python3", "-m", "maxtext.train"),
        cgroup="12:pids:/docker/c0ffee\n0::/\n",
        fds={
            0: "/dev/null",
            1: "pipe:[77]",
            4: f"{devices}/accel1",
            5: f"{devices}/accel0",
            6: f"{devices}/accel1",
        },
    )
    tree.add(501, fds={0: "/dev/null", 3: "socket:[5]", 4: "anon_inode:[eventpoll]"})
    result = scan(tmp_path, devices)
    assert result.devices == (f"{devices}/accel0", f"{devices}/accel1")
    assert len(result.holders) == 1
    holder = result.holders[0]
    assert holder.identity == ProcessIdentity(500, 987654)
    assert (holder.name, holder.uid, holder.ppid) == ("a) (b", 1000, 42)
    assert holder.cmdline == ("python3", "-m", "maxtext.train")
    assert holder.devices == (f"{devices}/accel0", f"{devices}/accel1")  # sorted, each once
    assert holder.cgroup == "/docker/c0ffee"
    assert result.scanned == 2


def test_pid_1_self_and_parent_are_never_read_or_reported(tmp_path: Path, devices: Path) -> None:
    tree = ProcTree(tmp_path / "proc")
    for pid in (1, os.getpid(), os.getppid(), 600):
        tree.add(pid, fds={3: f"{devices}/accel0"})
    result = scan(tmp_path, devices)
    assert [h.pid for h in result.holders] == [600]
    assert result.scanned == 1


def test_excludes_by_pid_name_and_uid(tmp_path: Path, devices: Path) -> None:
    tree = ProcTree(tmp_path / "proc")
    held = {3: f"{devices}/accel0"}
    tree.add(700, "keep", fds=held)
    tree.add(701, "by-pid", fds=held)
    tree.add(702, "node-exporter", fds=held)
    tree.add(703, "python3", cmdline=("/usr/bin/tpu-info", "--watch"), fds=held)  # argv[0]'s base name
    tree.add(704, "monitor", uid=4242, fds=held)
    excludes = Excludes(
        pids=frozenset({701}), names=frozenset({"node-exporter", "tpu-info"}), uids=frozenset({4242})
    )
    result = scan(tmp_path, devices, excludes)
    assert [h.pid for h in result.holders] == [700]
    assert result.excluded == 3  # the excluded PID is not even read


def test_kernel_threads_are_never_reported(tmp_path: Path, devices: Path) -> None:
    tree = ProcTree(tmp_path / "proc")
    tree.add(800, "kworker/0:1", ppid=2, flags=PF_KTHREAD, cmdline=(), fds={3: f"{devices}/accel0"})
    tree.add(801, "kthread-ish", ppid=2, cmdline=(), fds={3: f"{devices}/accel0"})  # empty cmdline + ppid 2
    tree.add(802, "kthreadd", ppid=0, flags=PF_KTHREAD, cmdline=())
    result = scan(tmp_path, devices)
    assert result.holders == ()
    assert result.excluded == 2


def test_zombies_vanished_and_broken_processes_are_counted_not_raised(tmp_path: Path, devices: Path) -> None:
    tree = ProcTree(tmp_path / "proc")
    held = {3: f"{devices}/accel0"}
    tree.add(900, "defunct", state="Z", cmdline=())  # a zombie: no fds
    (tmp_path / "proc" / "901").symlink_to("gone")  # exited between the listing and the read
    tree.add(902, fds=held, omit=("stat",))  # exited between reading its fds and its stat
    (tree.add(903, fds=held) / "stat").write_text("garbage")  # unreadable
    tree.add(904, fds={3: str(tmp_path / "closed-meanwhile")})
    tree.add(905, "fine", fds=held)
    result = scan(tmp_path, devices)
    assert [h.pid for h in result.holders] == [905]
    assert (result.zombies, result.vanished, result.unreadable) == (1, 2, 1)


def test_patterns_are_globbed_on_every_scan(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    tree = ProcTree(tmp_path / "proc")
    tree.add(1000, fds={3: f"{dev}/accel0"})
    scanner = HolderScanner(patterns=(f"{dev}/accel*",), proc_root=str(tmp_path / "proc"))
    assert scanner.scan() == ScanResult(holders=(), devices=())  # no device yet: nothing to hold
    (dev / "accel0").write_text("")
    result = scanner.scan()
    assert result.devices == (f"{dev}/accel0",)
    assert [h.pid for h in result.holders] == [1000]


def test_extra_path_lock_file_counts(tmp_path: Path, devices: Path) -> None:
    lock = tmp_path / "libtpu_lockfile"
    lock.write_text("")
    tree = ProcTree(tmp_path / "proc")
    tree.add(1100, fds={7: str(lock)})
    assert scan(tmp_path, devices).holders == ()
    result = scan(tmp_path, devices, extra=(str(lock),))
    assert [h.devices for h in result.holders] == [(str(lock),)]


def test_other_path_to_the_same_file_is_found_by_inode(tmp_path: Path, devices: Path) -> None:
    """What a containerised process sees under its own path is the same inode: stat() through the fd."""
    (tmp_path / "elsewhere").mkdir()
    alias = tmp_path / "elsewhere" / "tpu0"
    os.link(devices / "accel0", alias)
    tree = ProcTree(tmp_path / "proc")
    tree.add(1200, fds={3: str(alias), 4: str(alias)})
    tree.add(1201, fds={3: str(tmp_path / "elsewhere")})  # a path that is not the device: no match
    result = scan(tmp_path, devices)
    assert [(h.pid, h.devices) for h in result.holders] == [(1200, (str(alias),))]


def test_directories_and_vanished_paths_are_not_devices(tmp_path: Path) -> None:
    (tmp_path / "vfio").mkdir()
    (tmp_path / "vfio" / "devices").mkdir()
    (tmp_path / "vfio" / "0").write_text("")
    found = find_devices((f"{tmp_path}/vfio/*",), (str(tmp_path / "no-lock-file"),))
    assert found.paths == frozenset({f"{tmp_path}/vfio/0"})


def test_many_processes_are_shared_among_workers_with_the_same_result(tmp_path: Path, devices: Path) -> None:
    tree = ProcTree(tmp_path / "proc")
    # Never the test's own pid or its parent's: a scan leaves those out wherever /proc is (a PID of this
    # machine in that range made it scan 448 of 450).
    pids = [pid for pid in range(2000, 2452) if pid not in (os.getpid(), os.getppid())][:450]
    for pid in pids:
        fds = {0: "/dev/null", 1: "pipe:[9]", 2: str(tmp_path)}
        if pid % 50 == 0:
            fds[3] = f"{devices}/accel{pid % 2}"
        tree.add(pid, state="Z" if pid % 7 == 0 else "S", fds={} if pid % 7 == 0 else fds)
    results = [
        HolderScanner(patterns=(f"{devices}/accel*",), proc_root=str(tmp_path / "proc"), workers=n).scan()
        for n in (1, 2, 3)
    ]
    assert results[0] == results[1] == results[2]
    assert [h.pid for h in results[0].holders] == [p for p in pids if p % 50 == 0 and p % 7 != 0]
    assert (results[0].scanned, results[0].zombies) == (450, len([p for p in pids if p % 7 == 0]))
