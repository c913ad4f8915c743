"""The holder scan: on fixture /proc trees (exact cases) and on the real /proc with real children holding
real device nodes made with mknod."""

from __future__ import annotations

import contextlib
import logging
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.proctree import ProcTree
from tests.support.waiting import wait_for
from watchdog.core.process import ProcessIdentity
from watchdog.host.holders import Excludes, HolderScanner, ScanResult, find_devices
from watchdog.host.procfs import PF_KTHREAD

# ---------------------------------------------------------------- fixture trees


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
    for pid in range(2000, 2450):
        fds = {0: "/dev/null", 1: "pipe:[9]", 2: str(tmp_path)}
        if pid % 50 == 0:
            fds[3] = f"{devices}/accel{pid % 2}"
        tree.add(pid, state="Z" if pid % 7 == 0 else "S", fds={} if pid % 7 == 0 else fds)
    results = [
        HolderScanner(patterns=(f"{devices}/accel*",), proc_root=str(tmp_path / "proc"), workers=n).scan()
        for n in (1, 2, 3)
    ]
    assert results[0] == results[1] == results[2]
    pids = range(2000, 2450)
    assert [h.pid for h in results[0].holders] == [p for p in pids if p % 50 == 0 and p % 7 != 0]
    assert (results[0].scanned, results[0].zombies) == (450, len([p for p in pids if p % 7 == 0]))


# ---------------------------------------------------------------- real /proc, real children

CHILD = r"""
import os, signal, sys
fds = [os.open(path, os.O_RDONLY) for path in sys.argv[2:]]
if sys.argv[1] != "-":
    os.setgid(int(sys.argv[1]))
    os.setuid(int(sys.argv[1]))
def say(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
say("ready")
for line in sys.stdin:
    if line == "close\n":
        for fd in fds:
            os.close(fd)
        say("closed")
    elif line == "fork\n":
        pid = os.fork()
        if pid == 0:
            signal.pause()  # holds the inherited fds until killed
            os._exit(0)
        say(f"child {pid}")
"""


# /dev/random's driver (1:8): opens anywhere; other tests on this machine use /dev/full's (1:7), and a scan
# matches by device number, so a different one keeps their children out of these results.
TEST_RDEV = os.makedev(1, 8)


class Child:
    """A real process holding the given paths open; it obeys "close" and "fork" on its stdin."""

    def __init__(self, paths: list[Path], uid: int | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, "-" if uid is None else str(uid), *map(str, paths)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.forked: list[int] = []
        assert self.read() == "ready"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def read(self) -> str:
        assert self.proc.stdout is not None
        wait_for(
            lambda: select.select([self.proc.stdout], [], [], 0)[0], timeout=30, what="the child to talk"
        )
        return self.proc.stdout.readline().strip()

    def tell(self, command: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.read()

    def fork(self) -> int:
        pid = int(self.tell("fork").split()[1])
        self.forked.append(pid)
        return pid

    def close(self) -> None:
        for pid in self.forked:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        # The forked grandchildren are reparented to PID 1 (or a subreaper) once the child dies.


@pytest.fixture
def node_dir(tmp_path: Path) -> Path:
    """accel0 and accel1: real char devices with /dev/random's driver, which nothing else here holds."""
    dev = tmp_path / "dev"
    dev.mkdir()
    try:
        for i in (0, 1):
            os.mknod(dev / f"accel{i}", stat.S_IFCHR | 0o666, TEST_RDEV)
    except OSError as exc:
        pytest.skip(f"cannot mknod a device node here ({exc}); needs root on a filesystem without nodev")
    return dev


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in started:
        child.close()


def real_scan(node_dir: Path, pids: set[int]) -> dict[int, tuple[str, ...]]:
    """pid -> devices for the processes of interest (the machine runs other things too)."""
    result = HolderScanner(patterns=(f"{node_dir}/accel*",)).scan()
    return {h.pid: h.devices for h in result.holders if h.pid in pids}


def stat_fields(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()


def test_real_child_is_found_with_its_identity(node_dir: Path, children: list[Child]) -> None:
    child = Child([node_dir / "accel0"])
    children.append(child)
    idle = Child([])
    children.append(idle)
    result = HolderScanner(patterns=(f"{node_dir}/accel*",)).scan()
    mine = [h for h in result.holders if h.pid in (child.pid, idle.pid)]
    assert len(mine) == 1
    holder = mine[0]
    assert holder.identity == ProcessIdentity(child.pid, int(stat_fields(child.pid)[19]))
    assert holder.devices == (f"{node_dir}/accel0",)
    assert holder.uid == 0
    assert holder.ppid == os.getpid()
    assert holder.cmdline[0] == sys.executable
    assert holder.cgroup  # whatever this machine uses, something an SRE can read
    assert result.devices == (f"{node_dir}/accel0", f"{node_dir}/accel1")
    assert result.scanned > 2


def test_real_child_of_another_user(node_dir: Path, children: list[Child]) -> None:
    child = Child([node_dir / "accel1"], uid=65534)
    children.append(child)
    wait_for(lambda: os.stat(f"/proc/{child.pid}").st_uid == 65534, what="the child to drop root")
    result = HolderScanner(patterns=(f"{node_dir}/accel*",)).scan()
    assert [h.uid for h in result.holders if h.pid == child.pid] == [65534]


def test_same_device_under_another_path_is_found_by_device_number(
    node_dir: Path, tmp_path: Path, children: list[Child]
) -> None:
    elsewhere = tmp_path / "container-dev"
    elsewhere.mkdir()
    alias = elsewhere / "tpu0"
    os.mknod(alias, stat.S_IFCHR | 0o600, TEST_RDEV)  # another inode, the same device
    other = elsewhere / "not-a-tpu"
    os.mknod(other, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null's driver: not ours
    child = Child([alias])
    bystander = Child([other])
    children.extend([child, bystander])
    assert real_scan(node_dir, {child.pid, bystander.pid}) == {child.pid: (str(alias),)}


def test_child_that_closed_the_device_is_not_found(node_dir: Path, children: list[Child]) -> None:
    child = Child([node_dir / "accel0", node_dir / "accel1"])
    children.append(child)
    assert real_scan(node_dir, {child.pid}) == {child.pid: (f"{node_dir}/accel0", f"{node_dir}/accel1")}
    assert child.tell("close") == "closed"
    assert real_scan(node_dir, {child.pid}) == {}


def test_process_forked_by_a_holder_is_found_too(node_dir: Path, children: list[Child]) -> None:
    child = Child([node_dir / "accel0"])
    children.append(child)
    grandchild = child.fork()
    result = HolderScanner(patterns=(f"{node_dir}/accel*",)).scan()
    found = {h.pid: h for h in result.holders if h.pid in (child.pid, grandchild)}
    assert set(found) == {child.pid, grandchild}
    assert found[grandchild].ppid == child.pid
    assert found[grandchild].identity.start_time >= found[child.pid].identity.start_time


def test_unprivileged_scan_counts_what_it_cannot_read(node_dir: Path, children: list[Child]) -> None:
    """As a normal user, other users' fds are EACCES: counted as unreadable, never raised."""
    # Not tmp_path for the node: its parents are private to root, and the unprivileged scan must glob it.
    with tempfile.TemporaryDirectory(prefix="holders-", dir="/tmp") as top:
        os.chmod(top, 0o755)  # noqa: S103 - the unprivileged scan must reach the node
        os.mknod(f"{top}/accel0", stat.S_IFCHR | 0o600, TEST_RDEV)
        children.append(Child([Path(top) / "accel0"]))
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            try:
                os.close(read_end)
                os.setgid(65534)
                os.setuid(65534)
                result = HolderScanner(patterns=(f"{top}/accel*",)).scan()
                os.write(
                    write_end, f"{len(result.devices)} {len(result.holders)} {result.unreadable}".encode()
                )
            finally:
                os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as reader:
            devices, holders, unreadable = map(int, reader.read().split())
        os.waitpid(pid, 0)
    assert (devices, holders) == (1, 0)
    assert unreadable > 0


def test_same_path_in_another_mount_namespace_is_not_taken_from_the_cache(
    node_dir: Path, tmp_path: Path, children: list[Child]
) -> None:
    """The scan remembers per (mount namespace, path) whether a path is a device, so a path that is a plain
    file here but the TPU inside a container (same string, another namespace) is still stat-ed."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) from util-linux to make a private mount namespace")
    shared = tmp_path / "shared-path"
    shared.write_text("a plain file in this namespace")
    alias = tmp_path / "alias"
    os.mknod(alias, stat.S_IFCHR | 0o600, TEST_RDEV)
    plain = Child([shared])  # started first: scanned first, so the path is remembered as "not a device"
    children.append(plain)
    hold = (
        "import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); print('ready', flush=True); sys.stdin.read()"
    )
    contained = subprocess.Popen(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            'mount --bind "$1" "$2" && exec "$3" -c "$4" "$2"',
            "sh",
            str(alias),
            str(shared),
            sys.executable,
            hold,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert contained.stdout is not None
        line = contained.stdout.readline().strip()
        if line != "ready":
            contained.wait(timeout=30)
            assert contained.stderr is not None
            pytest.skip(f"cannot make a private mount namespace here: {contained.stderr.read().strip()}")
        found = real_scan(node_dir, {plain.pid, contained.pid})
        assert found == {contained.pid: (str(shared),)}
    finally:
        contained.kill()
        contained.wait()
        for stream in (contained.stdin, contained.stdout, contained.stderr):
            if stream is not None:
                stream.close()


def test_real_zombie_is_counted_not_reported(node_dir: Path) -> None:
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        wait_for(lambda: stat_fields(zombie.pid)[0] == "Z", timeout=30, what="the child to become a zombie")
        result = HolderScanner(patterns=(f"{node_dir}/accel*",)).scan()
        assert result.zombies >= 1
        assert zombie.pid not in {h.pid for h in result.holders}
    finally:
        zombie.wait()


@pytest.mark.parametrize(("major", "minor"), [(1, 3), (1, 5), (1, 9), (5, 0), (136, 0)])
def test_a_pattern_matching_a_node_everyone_holds_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, major: int, minor: int
) -> None:
    """A pattern typo like "/dev/*" must never turn every process holding /dev/null into a TPU holder."""
    node = tmp_path / "null-alike"
    try:
        os.mknod(node, stat.S_IFCHR | 0o600, os.makedev(major, minor))
    except OSError as error:
        pytest.skip(f"mknod is not possible here: {error}")
    with caplog.at_level(logging.ERROR):
        result = HolderScanner(patterns=(str(node),)).scan()
    assert result.holders == ()
    assert result.devices == ()
    assert "nearly every process holds" in caplog.text
