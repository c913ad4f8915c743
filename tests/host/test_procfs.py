"""Reading /proc: the parsers on odd input, and the reader on fixture trees and on the real /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from tests.support.proctree import ProcTree, stat_line
from watchdog.core.vocabulary import SigtermDisposition
from watchdog.host.procfs import (
    PF_EXITING,
    PF_KTHREAD,
    ProcessGoneError,
    ProcessUnreadableError,
    Procfs,
    parse_cmdline,
    parse_real_uid,
    parse_sigterm,
    parse_stat,
    pick_cgroup,
    read_stat,
    start_time,
)


@pytest.mark.parametrize("name", ["python3", "a) (b", "my prog", ")", "((", "x) S 1 2 (y", ""])
def test_stat_name_may_hold_spaces_and_parentheses(name: str) -> None:
    parsed = parse_stat(stat_line(4242, name, state="R", ppid=77, flags=64, start_time=123456))
    assert (parsed.pid, parsed.name, parsed.state, parsed.ppid) == (4242, name, "R", 77)
    assert (parsed.flags, parsed.start_time) == (64, 123456)


def test_stat_flags_tell_kernel_threads_and_zombies() -> None:
    kthread = parse_stat(stat_line(7, "kworker/0:1", ppid=2, flags=PF_KTHREAD | 0x40))
    zombie = parse_stat(stat_line(8, "defunct", state="Z"))
    assert kthread.is_kernel_thread
    assert not kthread.is_zombie
    assert zombie.is_zombie
    assert not zombie.is_kernel_thread


def test_stat_flags_tell_a_process_that_began_exiting() -> None:
    assert parse_stat(stat_line(9, "train", flags=PF_EXITING | 0x40)).is_exiting
    assert not parse_stat(stat_line(9, "train", flags=0x40)).is_exiting


def test_exit_code_is_field_52_and_absent_on_short_lines() -> None:
    line = stat_line(10, "gone", state="Z")
    fields = line.split()
    fields[-1] = "256"  # the wait status of exit(1)
    assert parse_stat(" ".join(fields)).exit_code == 256
    assert parse_stat(line).exit_code == 0
    short = " ".join(line.split()[:22])  # a kernel before 3.5 stops at field 44; 22 is all the scan needs
    assert parse_stat(short).exit_code is None
    assert parse_stat(short).start_time == 1000


def test_real_stat_of_this_process_parses() -> None:
    with open("/proc/self/stat") as handle:
        parsed = parse_stat(handle.read())
    assert parsed.pid == os.getpid()
    assert parsed.ppid == os.getppid()
    assert parsed.start_time > 0
    assert not parsed.is_kernel_thread


@pytest.mark.parametrize(
    "text",
    ["", "1234", "12 (name) S 1", "x (name) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0", "12 (a S 1"],
)
def test_malformed_stat_is_a_clear_error(text: str) -> None:
    with pytest.raises(ValueError, match="malformed /proc stat line"):
        parse_stat(text)


def test_real_uid_is_the_first_uid_column() -> None:
    assert parse_real_uid("Name:\tx\nUid:\t1000\t0\t0\t0\nGid:\t0\t0\t0\t0\n") == 1000
    with pytest.raises(ValueError, match="Uid"):
        parse_real_uid("Name:\tx\n")
    with pytest.raises(ValueError, match="Uid"):
        parse_real_uid("Uid:\tnope\n")


@pytest.mark.parametrize(
    ("ignored", "caught", "disposition"),
    [("0000000000000000", "0000000000000000", SigtermDisposition.DEFAULT),
     ("0000000001001000", "0000000100000002", SigtermDisposition.DEFAULT),  # plain JAX, as measured
     ("0000000001001000", "0000000100004002", SigtermDisposition.CAUGHT),  # JAX after initialize
     ("0000000000004000", "0000000000000000", SigtermDisposition.IGNORED),
     ("0000000000004000", "0000000000004000", SigtermDisposition.IGNORED),  # SIG_IGN is what runs
     ("ffffffffffffbfff", "ffffffffffffbfff", SigtermDisposition.DEFAULT)],  # every bit but SIGTERM's
)  # fmt: skip
def test_sigterm_disposition_is_bit_14_of_the_masks(
    ignored: str, caught: str, disposition: SigtermDisposition
) -> None:
    status = "Name:\tpython3\nSigQ:\t0/1\nSigPnd:\t0000000000004000\nSigBlk:\t0000000000004000\n"
    assert parse_sigterm(f"{status}SigIgn:\t{ignored}\nSigCgt:\t{caught}\n") is disposition


@pytest.mark.parametrize("masks", ["", "SigIgn:\t0\n", "SigIgn:\tzz\nSigCgt:\t0\n"])
def test_sigterm_disposition_is_unknown_without_both_masks(masks: str) -> None:
    assert parse_sigterm(f"Name:\tx\n{masks}") is None


def test_real_sigterm_disposition_of_a_child(tmp_path: Path) -> None:
    """A real child ignoring SIGTERM, then catching it: read from its /proc status through Procfs."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import signal, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
         "print(1, flush=True); sys.stdin.readline(); signal.signal(signal.SIGTERM, lambda *_: None); "
         "print(2, flush=True); sys.stdin.readline()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdin is not None
    assert child.stdout is not None
    try:
        assert child.stdout.readline() == "1\n"
        assert Procfs().status(child.pid)[1] is SigtermDisposition.IGNORED
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline() == "2\n"
        assert Procfs().status(child.pid) == (os.getuid(), SigtermDisposition.CAUGHT)
    finally:
        child.kill()
        child.wait()
        child.stdin.close()
        child.stdout.close()


def test_cmdline_is_split_on_nul() -> None:
    assert parse_cmdline(b"python3\0-m\0train\0") == ("python3", "-m", "train")
    assert parse_cmdline(b"python3\0\0x\0") == ("python3", "", "x")  # an empty argument survives
    assert parse_cmdline(b"nginx: worker process") == ("nginx: worker process",)  # rewrote its argv
    assert parse_cmdline(b"") == ()
    assert parse_cmdline(b"caf\xe9\0") == ("caf\ufffd",)  # not UTF-8: replaced, never an exception


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0::/system.slice/tpu-train.service\n", "/system.slice/tpu-train.service"),
        (
            "12:pids:/docker/0123abcd\n5:cpu,cpuacct:/docker/0123abcd\n1:name=systemd:/docker/0123abcd\n0::/\n",
            "/docker/0123abcd",
        ),
        (
            "0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-9f3.scope\n",
            "/kubepods.slice/kubepods-burstable.slice/cri-containerd-9f3.scope",
        ),
        (
            "4:memory:/user.slice\n1:name=systemd:/user.slice/session-3.scope\n0::/\n",
            "/user.slice/session-3.scope",
        ),
        ("4:memory:/process_api/abc\n1:name=systemd:/\n0::/\n", "/process_api/abc"),
        ("4:memory:/\n0::/\n", "/"),
        ("", ""),
        ("garbage\n", ""),
    ],
)
def test_cgroup_picks_the_path_an_sre_recognises(text: str, expected: str) -> None:
    assert pick_cgroup(text) == expected


def test_fixture_tree_is_read(tmp_path: Path) -> None:
    tree = ProcTree(tmp_path / "proc")
    tree.add(
        300,
        "a) (b",
        uid=1000,
        cmdline=("python3", "-m", "train"),
        cgroup="0::/docker/abc\n",
        fds={0: "/dev/null", 3: "socket:[123]", 4: "/dev/accel0"},
    )
    procfs = Procfs(str(tmp_path / "proc"))
    assert procfs.pids() == [300]
    assert procfs.stat(300).name == "a) (b"
    assert procfs.real_uid(300) == 1000
    assert procfs.cmdline(300) == ("python3", "-m", "train")
    assert procfs.cgroup(300) == "/docker/abc"
    assert sorted(procfs.fd_links(300)) == [("0", "/dev/null"), ("3", "socket:[123]"), ("4", "/dev/accel0")]
    assert procfs.mount_namespace(300) is None  # fixture trees have no ns/


def test_missing_files_mean_the_process_is_gone(tmp_path: Path) -> None:
    tree = ProcTree(tmp_path / "proc")
    tree.add(301, omit=("stat", "status", "cmdline", "cgroup"))
    (tmp_path / "proc" / "302").symlink_to("nowhere")
    procfs = Procfs(str(tmp_path / "proc"))
    for read in (procfs.stat, procfs.real_uid, procfs.cmdline, procfs.cgroup):
        with pytest.raises(ProcessGoneError, match="pid 301"):
            read(301)
    with pytest.raises(ProcessGoneError, match="pid 302"):
        procfs.fd_links(302)
    with pytest.raises(ProcessGoneError):
        procfs.fd_links(999)


def test_empty_stat_is_gone_and_garbage_stat_is_unreadable(tmp_path: Path) -> None:
    tree = ProcTree(tmp_path / "proc")
    (tree.add(303) / "stat").write_text("")
    (tree.add(304) / "stat").write_text("not a stat line")
    (tree.add(305) / "status").write_text("Name:\tx\n")
    procfs = Procfs(str(tmp_path / "proc"))
    with pytest.raises(ProcessGoneError):
        procfs.stat(303)
    with pytest.raises(ProcessUnreadableError, match="malformed"):
        procfs.stat(304)
    with pytest.raises(ProcessUnreadableError, match="Uid"):
        procfs.real_uid(305)


def test_read_stat_survives_odd_names_and_is_none_once_gone(tmp_path: Path) -> None:
    """The read before a signal: None (never an exception) for a missing, empty or truncated stat."""
    tree = ProcTree(tmp_path / "proc")
    tree.add(42, "a) b) (c", start_time=22)
    (tree.add(44) / "stat").write_text("44 (truncated")
    (tree.add(45) / "stat").write_text("")
    root = str(tmp_path / "proc")
    stat = read_stat(42, root)
    assert stat is not None
    assert (stat.name, stat.state, stat.start_time) == ("a) b) (c", "S", 22)
    assert start_time(42, root) == 22
    assert read_stat(43, root) is None
    assert start_time(43, root) is None
    assert read_stat(44, root) is None
    assert read_stat(45, root) is None
    (tmp_path / "proc" / "46").write_text("")  # a file where a pid directory should be: ENOTDIR
    assert read_stat(46, root) is None


def test_read_stat_and_the_scan_read_the_same_facts() -> None:
    quick, scanned = read_stat(os.getpid()), Procfs().stat(os.getpid())
    assert quick is not None
    assert (quick.pid, quick.name, quick.ppid, quick.start_time) == (
        scanned.pid,
        scanned.name,
        scanned.ppid,
        scanned.start_time,
    )


def test_children_are_those_of_every_thread() -> None:
    """A child started from another thread is listed under that thread's task, not the main one's."""
    started: list[subprocess.Popen[bytes]] = []
    worker = threading.Thread(target=lambda: started.append(subprocess.Popen(["cat"], stdin=subprocess.PIPE)))
    worker.start()
    worker.join()
    main = subprocess.Popen(["cat"], stdin=subprocess.PIPE)
    try:
        children = Procfs().children(os.getpid())
        assert children is not None
        assert {main.pid, started[0].pid} <= set(children)
        assert children == sorted(children)
        assert Procfs().children(main.pid) == []
    finally:
        for proc in (main, *started):
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=20)


def test_children_are_unknown_without_the_kernel_lists_or_the_process(tmp_path: Path) -> None:
    ProcTree(tmp_path / "proc").add(310)
    assert Procfs(str(tmp_path / "proc")).children(310) is None  # a fixture tree keeps no task/ lists
    assert Procfs(str(tmp_path / "proc")).children(311) is None


def test_fd_link_to_nowhere_is_still_a_link(tmp_path: Path) -> None:
    """A fixture link to a missing path reads like a closed file's path; its stat says "closed" (None)."""
    tree = ProcTree(tmp_path / "proc")
    tree.add(306, fds={5: str(tmp_path / "missing")})
    procfs = Procfs(str(tmp_path / "proc"))
    with procfs.fd_dir(306) as fds:
        assert fds.links() == [("5", str(tmp_path / "missing"))]
        assert fds.stat("5") is None
        assert fds.stat("6") is None


def test_fds_with_gaps_are_all_read(tmp_path: Path) -> None:
    tree = ProcTree(tmp_path / "proc")
    tree.add(307, fds={0: "/a", 1: "/b", 7: "/c", 1000: "/d"})
    assert sorted(Procfs(str(tmp_path / "proc")).fd_links(307)) == [
        ("0", "/a"),
        ("1", "/b"),
        ("1000", "/d"),
        ("7", "/c"),
    ]


def test_real_fds_of_this_process(tmp_path: Path) -> None:
    target = tmp_path / "held"
    target.write_text("x")
    with open(target) as held:
        procfs = Procfs()
        links = dict(procfs.fd_links(os.getpid()))
        assert links[str(held.fileno())] == str(target)
        with procfs.fd_dir(os.getpid()) as fds:
            st = fds.stat(str(held.fileno()))
        assert st is not None
        assert st.st_ino == os.stat(target).st_ino
    assert procfs.mount_namespace(os.getpid()) == os.readlink("/proc/self/ns/mnt")


def _in_child_as_nobody(root: Path, pid: int) -> str:
    """Run `fd_links(pid)` in a forked child that dropped root (root ignores mode bits, so EACCES needs a
    real unprivileged process); return the name of what it raised."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        try:
            os.close(read_end)
            os.setgid(65534)
            os.setuid(65534)
            try:
                Procfs(str(root)).fd_links(pid)
                outcome = "no error"
            except (ProcessGoneError, ProcessUnreadableError) as exc:
                outcome = type(exc).__name__
            os.write(write_end, outcome.encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        outcome = reader.read().decode()
    os.waitpid(child, 0)
    return outcome


def test_unreadable_fd_dir_is_unreadable_not_gone() -> None:
    # Not tmp_path: its parents are private to root, and the unprivileged child must reach the tree.
    with tempfile.TemporaryDirectory(prefix="proctree-", dir="/tmp") as top:
        os.chmod(top, 0o755)  # noqa: S103 - the unprivileged child must traverse it
        root = Path(top) / "proc"
        ProcTree(root).add(308, fds={3: "/dev/accel0"})
        (root / "308" / "fd").chmod(0o000)
        try:
            assert _in_child_as_nobody(root, 308) == "ProcessUnreadableError"
            assert _in_child_as_nobody(root, 309) == "ProcessGoneError"
        finally:
            (root / "308" / "fd").chmod(0o755)


def test_pids_after_finds_a_new_process_and_never_a_thread(tmp_path: Path) -> None:
    """The PIDs allocated since, looked up one by one: a new process is there; a new thread of an old one
    (its id names a /proc entry too) is not; a fixture tree without the counters says None."""
    last = Procfs().last_pid()
    assert last is not None
    ready, stop = threading.Event(), threading.Event()
    thread = threading.Thread(target=lambda: (ready.set(), stop.wait()), daemon=True)
    thread.start()
    ready.wait()
    child = subprocess.Popen(["sleep", "60"])
    try:
        found = Procfs().pids_after(last)
        assert found is not None
        assert child.pid in found
        assert thread.native_id not in found
    finally:
        stop.set()
        child.kill()
        child.wait()
    tree = ProcTree(tmp_path / "proc")
    tree.add(4000, "launcher", start_time=1000)
    assert Procfs(str(tmp_path / "proc")).pids_after(3000) is None


def test_pids_after_follows_the_numbers_round_a_wrap_and_gives_up_past_its_bound(tmp_path: Path) -> None:
    root = tmp_path / "proc"
    (root / "sys" / "kernel").mkdir(parents=True)
    (root / "sys" / "kernel" / "pid_max").write_text("100\n")
    (root / "sys" / "kernel" / "ns_last_pid").write_text("5\n")
    for pid, tgid in ((97, 97), (3, 3), (4, 3), (50, 50)):  # 4: a thread of 3; 50: older than the scan
        (root / str(pid)).mkdir()
        (root / str(pid) / "status").write_text(f"Name:\tx\nTgid:\t{tgid}\nPid:\t{pid}\n")
    assert Procfs(str(root)).pids_after(95) == [97, 3]
    (root / "sys" / "kernel" / "pid_max").write_text("4194304\n")
    assert Procfs(str(root)).pids_after(95) is None  # millions allocated since: list /proc instead
