"""Bad input from /proc: stat, status, cmdline, cgroup and fd links of any contents give values or their two
documented outcomes (gone, unreadable), and real processes with odd names and replaced nodes are found.
Property-based (hypothesis), with real processes."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.support.bad_input import FEW, SOME, clean_text
from tests.support.proctree import ProcTree, stat_line
from tests.support.workloads import TEST_NUMBER, make_device
from watchdog.host.holders import HolderScanner
from watchdog.host.procfs import (
    ProcessGoneError,
    ProcessUnreadableError,
    Procfs,
    ProcStat,
    parse_cmdline,
    parse_real_uid,
    parse_stat,
    pick_cgroup,
)

# --- /proc ------------------------------------------------------------------------------------------
comm_names = st.text(max_size=40) | st.sampled_from(
    ["", " ", ")", "((", ") (", "a) (b", "x\ny", "a) S 1 2 (b"]
)


@SOME
@given(comm_names, st.integers(1, 2**22), st.integers(0, 2**22), st.integers(0, 2**32), st.integers(0, 2**63))
def test_stat_name_is_returned_intact(name: str, pid: int, ppid: int, flags: int, start: int) -> None:
    """Spaces, parentheses, ") (", newlines and empty names: the name runs to the LAST ')'."""
    parsed = parse_stat(stat_line(pid, name, "S", ppid, flags, start))
    assert parsed == ProcStat(pid, name, "S", ppid, flags, start, exit_code=0)  # stat_line's field 52 is 0


@SOME
@given(st.text(max_size=300) | st.binary(max_size=300).map(lambda b: b.decode("utf-8", "replace")))
def test_stat_junk_is_a_value_error(text: str) -> None:
    with contextlib.suppress(ValueError):
        parse_stat(text)


@SOME
@given(comm_names, st.integers(0, 600))
def test_truncated_stat_is_a_value_error_or_the_fields_before_the_cut(name: str, cut: int) -> None:
    line = stat_line(4242, name, "R", 77, 64, 123456)
    try:
        parsed = parse_stat(line[:cut])
    except ValueError:
        return
    assert (parsed.pid, parsed.name, parsed.state, parsed.ppid, parsed.flags) == (4242, name, "R", 77, 64)
    assert "123456".startswith(str(parsed.start_time))


@SOME
@given(
    st.text(max_size=200)
    | st.lists(st.tuples(st.text(max_size=6), clean_text, clean_text), max_size=4).map(
        lambda rows: "\n".join(":".join(row) for row in rows)
    )
)
def test_cgroup_of_odd_lines_is_one_of_its_paths(text: str) -> None:
    chosen = pick_cgroup(text)
    rows = [line.split(":", 2) for line in text.splitlines()]
    paths = [row[2] for row in rows if len(row) == 3 and row[2]]
    if paths:
        assert chosen in [*paths, "/"]
    else:
        assert chosen == ""


@SOME
@given(st.text(max_size=100), st.binary(max_size=100))
def test_status_and_cmdline_junk(status: str, cmdline: bytes) -> None:
    with contextlib.suppress(ValueError):
        assert parse_real_uid(status) >= 0
    assert all(isinstance(arg, str) for arg in parse_cmdline(cmdline))


proc_bytes = st.binary(max_size=200) | comm_names.map(lambda n: stat_line(9, n).encode())


@FEW
@given(proc_bytes, proc_bytes, proc_bytes, proc_bytes)
def test_procfs_on_any_file_contents_gives_values_or_the_two_outcomes(
    stat: bytes, status: bytes, cgroup: bytes, cmdline: bytes
) -> None:
    """A fixture process whose files hold anything: each read gives a value, "gone" or "unreadable"."""
    with tempfile.TemporaryDirectory() as top:
        pid_dir = ProcTree(Path(top) / "proc").add(9)
        for name, raw in (("stat", stat), ("status", status), ("cgroup", cgroup), ("cmdline", cmdline)):
            (pid_dir / name).write_bytes(raw)
        procfs = Procfs(str(Path(top) / "proc"))
        for read in (procfs.stat, procfs.real_uid, procfs.cgroup, procfs.cmdline, procfs.fd_links):
            with contextlib.suppress(ProcessGoneError, ProcessUnreadableError):
                read(9)


fd_targets = st.one_of(
    st.binary(min_size=1, max_size=120).filter(lambda b: b"\0" not in b),
    st.sampled_from(
        ["socket:[123]", "pipe:[77]", "anon_inode:[eventfd]", "anon_inode:inotify", "/dev/accel0 (deleted)"]
    ),
    clean_text.filter(lambda t: t and "\0" not in t).map(lambda t: "/tmp/" + t),
    clean_text.filter(lambda t: t and "\0" not in t).map(lambda t: f"/dev/{t}\n (deleted)"),
)


@FEW
@given(st.lists(fd_targets, min_size=1, max_size=6))
def test_fd_link_targets_are_returned_intact_and_never_break_a_scan(targets: list[str | bytes]) -> None:
    """Spaces, newlines, " (deleted)", anon inodes, sockets, bytes that are not UTF-8 (as os.fsdecode
    gives them): the link is returned as the kernel wrote it, and the scan still finds the real holder."""
    with tempfile.TemporaryDirectory() as top:
        device = make_device(Path(top))
        tree = ProcTree(Path(top) / "proc")
        tree.add(50, fds={3: str(device)})
        pid_dir = tree.add(51)
        for fd, target in enumerate(targets):
            os.symlink(os.fsdecode(target), pid_dir / "fd" / str(fd))
        procfs = Procfs(str(Path(top) / "proc"))
        assert sorted(procfs.fd_links(51)) == sorted(
            (str(fd), os.fsdecode(t)) for fd, t in enumerate(targets)
        )
        result = HolderScanner(
            patterns=[str(device)], proc_root=str(Path(top) / "proc"), allow_numbers=[TEST_NUMBER]
        ).scan()
        assert [h.pid for h in result.holders] == [50]


def test_a_deleted_node_seen_through_another_path_is_held_by_device_number(tmp_path: Path) -> None:
    """ " (deleted)" is part of the link's path; the stat through the fd finds the device by its numbers."""
    device = make_device(tmp_path)
    elsewhere = tmp_path / "old"
    elsewhere.mkdir()
    ghost = make_device(elsewhere, "accel0 (deleted)")  # what the fd's link names: the same device numbers
    tree = ProcTree(tmp_path / "proc")
    tree.add(60, fds={3: str(ghost)})
    result = HolderScanner(
        patterns=[str(device)], proc_root=str(tmp_path / "proc"), allow_numbers=[TEST_NUMBER]
    ).scan()
    assert [(h.pid, h.devices) for h in result.holders] == [(60, (str(ghost),))]


def _holding(*paths: Path) -> subprocess.Popen[str]:
    """A real child process holding `paths` open until its stdin closes."""
    code = (
        "import os, sys\nfds = [os.open(p, os.O_RDONLY) for p in sys.argv[1:]]\n"
        "print('ready', flush=True)\nsys.stdin.read()"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, *map(os.fsdecode, paths)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdout is not None
    assert child.stdout.readline() == "ready\n"
    return child


def test_real_process_fd_links_with_odd_names_are_intact(tmp_path: Path) -> None:
    odd = [
        tmp_path / "with space\nand newline",
        tmp_path / os.fsdecode(b"not utf8 \xff\xfe"),
        tmp_path / "x (deleted)",
    ]
    for path in odd:
        path.write_text("x")
    gone = tmp_path / "removed later"
    gone.write_text("x")
    child = _holding(*odd, gone)
    try:
        gone.unlink()
        targets = {target for _, target in Procfs().fd_links(child.pid)}
        assert {str(path) for path in odd} <= targets
        assert f"{gone} (deleted)" in targets
    finally:
        child.kill()
        child.communicate()


def test_real_process_holding_a_replaced_device_node_is_found(tmp_path: Path) -> None:
    """The node is deleted and made again (a driver reload): the holder's link says "(deleted)"."""
    device = make_device(tmp_path)
    child = _holding(device)
    try:
        device.unlink()
        make_device(tmp_path)
        result = HolderScanner(patterns=[str(device)], allow_numbers=[TEST_NUMBER]).scan()
        held = {h.pid: h.devices for h in result.holders}
        assert held.get(child.pid) == (f"{device} (deleted)",)
    finally:
        child.kill()
        child.communicate()
