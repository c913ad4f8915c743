"""The holder scan on the real /proc with real children holding real device nodes: identity, other users,
another path to the same device, forks, closed devices, mount namespaces, zombies (the fixture-tree cases:
test_holders.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.readable import readable
from tests.support.waiting import wait_for
from watchdog.core.devices import Verdict
from watchdog.core.process import ProcessIdentity
from watchdog.host.holders import HolderScanner

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
# matches by device number, so a different one keeps their children out of these results. Its class is mem
# (the kernel's own), so the scans here name it in allow_numbers.
TEST_NUMBER = (1, 8)
TEST_RDEV = os.makedev(*TEST_NUMBER)


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
        wait_for(lambda: readable([self.proc.stdout]), timeout=30, what="the child to talk")
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
    result = HolderScanner(patterns=(f"{node_dir}/accel*",), allow_numbers=[TEST_NUMBER]).scan()
    return {h.pid: h.devices for h in result.holders if h.pid in pids}


def stat_fields(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()


def test_real_child_is_found_with_its_identity(node_dir: Path, children: list[Child]) -> None:
    child = Child([node_dir / "accel0"])
    children.append(child)
    idle = Child([])
    children.append(idle)
    result = HolderScanner(patterns=(f"{node_dir}/accel*",), allow_numbers=[TEST_NUMBER]).scan()
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
    result = HolderScanner(patterns=(f"{node_dir}/accel*",), allow_numbers=[TEST_NUMBER]).scan()
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
    result = HolderScanner(patterns=(f"{node_dir}/accel*",), allow_numbers=[TEST_NUMBER]).scan()
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
                result = HolderScanner(patterns=(f"{top}/accel*",), allow_numbers=[TEST_NUMBER]).scan()
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
        result = HolderScanner(patterns=(f"{node_dir}/accel*",), allow_numbers=[TEST_NUMBER]).scan()
        assert result.zombies >= 1
        assert zombie.pid not in {h.pid for h in result.holders}
    finally:
        zombie.wait()


@pytest.mark.parametrize(("major", "minor"), [(1, 3), (1, 5), (1, 9), (5, 0), (136, 0)])
def test_a_pattern_matching_a_node_everyone_holds_is_refused(tmp_path: Path, major: int, minor: int) -> None:
    """A pattern typo like "/dev/*" must never turn every process holding /dev/null into a TPU holder, even
    when devices.allow_numbers names it (the configuration refuses that too)."""
    node = tmp_path / "null-alike"
    try:
        os.mknod(node, stat.S_IFCHR | 0o600, os.makedev(major, minor))
    except OSError as error:
        pytest.skip(f"mknod is not possible here: {error}")
    result = HolderScanner(patterns=(str(node),), allow_numbers=[(major, minor)]).scan()
    assert result.holders == ()
    assert result.devices == ()
    (matched,) = result.matched
    assert matched.judgement.verdict is Verdict.REFUSED
    assert "nearly every process holds" in matched.judgement.why


# The kernel's own devices a broad pattern could match, by the real sysfs's class: journald holds /dev/kmsg,
# everyone may hold /dev/random, gcsfuse holds /dev/fuse. None is ever a TPU device.
KERNEL_NODES = [("kmsg", (1, 11), "mem"), ("random", (1, 8), "mem"), ("fuse", (10, 229), "misc")]


@pytest.mark.parametrize(("name", "number", "cls"), KERNEL_NODES, ids=[n for n, _, _ in KERNEL_NODES])
def test_a_kernel_device_under_a_broad_pattern_never_makes_a_holder(
    tmp_path: Path, children: list[Child], name: str, number: tuple[int, int], cls: str
) -> None:
    """A real child holds a node numbered like /dev/kmsg (/dev/random, /dev/fuse) in a directory a broad
    pattern covers: the real /sys says its class, so it is refused and the child is nobody's TPU holder."""
    if not os.path.exists(f"/sys/dev/char/{number[0]}:{number[1]}"):
        pytest.skip(f"this kernel has no {name} device ({number[0]}:{number[1]})")
    node = tmp_path / name
    os.mknod(node, stat.S_IFCHR | 0o600, os.makedev(*number))
    child = Child([node])
    children.append(child)
    result = HolderScanner(patterns=(f"{tmp_path}/*",)).scan()
    assert child.pid not in {h.pid for h in result.holders}
    assert result.devices == ()
    (matched,) = result.matched
    assert (matched.facts.subsystem, matched.judgement.verdict) == (cls, Verdict.REFUSED)
    assert matched.judgement.why == f"class {cls}: one of the kernel's own devices"
