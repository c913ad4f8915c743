"""Bad input to every parser the daemon feeds from outside: the state file, the configuration (file,
environment, flags, command line) and /proc. Each either gives a value or raises its one documented error;
nothing else escapes. Property-based (hypothesis), with real files, real processes and the real CLI."""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import glob
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.proctree import ProcTree, stat_line
from tests.support.workloads import make_device
from watchdog.cli import COMMANDS
from watchdog.config.schema import BY_ENV, BY_KEY, SECTIONS
from watchdog.config.settings import ConfigError, add_config_arguments, load_config
from watchdog.core.lifecycle import ActiveDrain, Event
from watchdog.core.process import ProcessIdentity
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
from watchdog.store.records import SavedState, SignalRecord, StateFormatError
from watchdog.store.statefile import STATE_FILE, StateStore

CLI = str(Path(sys.executable).parent / "tpu-watchdog")
FEW = settings(max_examples=60, deadline=None)
SOME = settings(max_examples=150, deadline=None)

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12), st.just(10**400)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=16,
)


# --- the state file ---------------------------------------------------------------------------------
GOOD_STATE = SavedState(
    "b",
    (
        Event(
            "ev", "maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE", 100.0, False, 400.0, confirmed=False
        ),
    ),
    ActiveDrain(["ev"], 101.0, 401.0),
    last_outcome="drained",
    signals=(
        SignalRecord(ProcessIdentity(10, 5), "python3", "SIGTERM", 102.0, 102.5, "sent"),
        SignalRecord(ProcessIdentity(11, 6), "", "SIGKILL", 402.0),
    ),
)
BAD_VALUES = st.one_of(
    json_values,
    st.sampled_from([-1, -1e300, float("nan"), float("inf"), float("-inf"), 10**400, -(10**400), 0, 2**63]),
    st.sampled_from(["SIGNOPE", "sigterm", "", "SIG_DFL", "SIGRTMIN+1", "15", "x" * 100_000, "\udc80"]),
    st.sampled_from([[], {}, [{}], {"format": "tpu-watchdog-state"}, True]),
)


def _paths(document: object, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON document: dict keys and list indices, nested."""
    found = [prefix] if prefix else []
    if isinstance(document, dict):
        for key, item in document.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(document, list):
        for index, item in enumerate(document):
            found += _paths(item, (*prefix, index))
    return found


@st.composite
def mutated_states(draw: st.DrawFn) -> object:
    """The valid document with one to three places replaced by a wrong value, or deleted."""
    document: Any = copy.deepcopy(GOOD_STATE.to_json(written_at=500.0))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(document)
        if not paths:
            break
        *parents, last = draw(st.sampled_from(paths))
        holder = document
        for step in parents:
            holder = holder[step]
        if draw(st.booleans()) and isinstance(holder, dict):
            del holder[last]
        else:
            holder[last] = copy.deepcopy(draw(BAD_VALUES))  # a later step must not change the strategy's own
    return document


def _state_or_format_error(document: object) -> SavedState | None:
    try:
        state = SavedState.from_json(document)
    except StateFormatError:
        return None
    # What is accepted is a state the daemon can write back and read again: nothing non-finite in it.
    again = json.loads(json.dumps(state.to_json(written_at=1.0), allow_nan=False))
    assert SavedState.from_json(again) == state
    return state


@SOME
@given(json_values | st.fixed_dictionaries({"format": st.just("tpu-watchdog-state"), "version": st.just(1)}))
def test_state_from_any_json_is_a_state_or_a_format_error(document: object) -> None:
    _state_or_format_error(document)


@SOME
@given(mutated_states())
def test_state_with_wrong_fields_is_a_state_or_a_format_error(document: object) -> None:
    """Wrong types, negative, NaN, infinite and huge numbers, huge strings, unknown signal names, missing
    fields: found by the field check, never as a KeyError, TypeError or OverflowError."""
    _state_or_format_error(document)
    text = json.dumps(document)  # as the store reads it: NaN and Infinity are JSON to Python
    _state_or_format_error(json.loads(text))


def test_state_huge_integer_time_is_a_format_error() -> None:
    """Found by the property above: a time too large for a float raised OverflowError out of the store."""
    document = GOOD_STATE.to_json(written_at=1.0)
    document["drain"]["deadline_at"] = 10**400  # type: ignore[index]
    with pytest.raises(StateFormatError, match=r"drain\.deadline_at: expected a number"):
        SavedState.from_json(json.loads(json.dumps(document)))
    document = GOOD_STATE.to_json(written_at=1.0) | {"version": True}
    with pytest.raises(StateFormatError, match="version: expected 1"):
        SavedState.from_json(document)


state_bytes = st.one_of(
    st.binary(max_size=300),
    mutated_states().map(lambda d: json.dumps(d).encode()),
    json_values.map(lambda d: json.dumps(d).encode()),
    st.just(json.dumps(GOOD_STATE.to_json(1.0)).encode("utf-16")),
)


@FEW
@given(state_bytes)
def test_state_store_sets_any_bad_file_aside_and_starts_clean(raw: bytes) -> None:
    try:
        expected: SavedState | None = SavedState.from_json(json.loads(raw))
    except (ValueError, RecursionError):
        expected = None
    with tempfile.TemporaryDirectory() as state_dir:
        path = os.path.join(state_dir, STATE_FILE)
        Path(path).write_bytes(raw)
        store = StateStore(state_dir, boot_id="b")
        if expected is None:
            assert store.state == SavedState("b")
            assert not os.path.exists(path)
            (aside,) = glob.glob(path + ".corrupt-*")
            assert Path(aside).read_bytes() == raw  # kept for a post-mortem
        elif expected.boot_id == "b":
            assert store.state == expected
        else:
            assert store.state == SavedState("b")


# --- the configuration ------------------------------------------------------------------------------
def _string(value: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, but TOML wants DEL escaped too and no surrogates."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml(value: object) -> str:
    """A TOML value: inline arrays and tables, every string as an escaped basic string."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(repr(value), repr(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_string(k)} = {_toml(item)}" for k, item in value.items()) + "}"
    return str(value)  # a datetime literal


def _document(entries: dict[str, object]) -> str:
    """A TOML file from dotted keys (the section once, as a [table])."""
    top = [f"{_string(key)} = {_toml(value)}" for key, value in entries.items() if "." not in key]
    sections: dict[str, list[str]] = {}
    for key, value in entries.items():
        if "." in key:
            section, _, leaf = key.partition(".")
            sections.setdefault(section, []).append(f"{_string(leaf)} = {_toml(value)}")
    tables = [f"[{_string(name)}]\n" + "\n".join(lines) for name, lines in sections.items()]
    return "\n".join(top) + "\n" + "\n".join(tables) + "\n"


GOOD_VALUES: dict[str, object] = {
    "state_dir": "/var/lib/tpu-watchdog", "listen": "127.0.0.1:0", "log_level": "info", "dry_run": True,
    "metadata.host": "127.0.0.1:8080", "devices.patterns": ["/dev/accel*"], "devices.extra_paths": [],
    "exclude.pids": [1], "exclude.names": ["sshd"], "exclude.uids": [0], "drain.maintenance_grace": 1.5,
    "drain.preemption_grace": 0, "drain.on_timeout": "leave", "events.migrate": "drain",
    "events.unknown": "ignore", "upcoming_maintenance.drain_before_window": 0,
    "upcoming_maintenance.drain_when_ongoing": False, "hooks.on_event_start": ["/bin/true", "x"],
    "hooks.on_drain_end": [], "hooks.on_event_clear": ["true"], "hooks.timeout": 5,
}  # fmt: skip
clean_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
toml_scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(),
    clean_text,
    st.sampled_from(
        ["", " ", "/", "relative", "/a\x00b", "127.0.0.1:\u00b2", "[::1]:99999", "KILL", "a:b:c"]
    ),
    st.datetimes(),
)
toml_values = st.recursive(
    toml_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(clean_text, inner, max_size=2),
    max_leaves=6,
)


def _load(contents: str | bytes, environ: dict[str, str] | None = None, *argv: str) -> str | None:
    """Load a configuration file holding `contents`; the ConfigError's message, or None if it loaded."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "config.toml"
        path.write_bytes(contents.encode() if isinstance(contents, str) else contents)
        parser = argparse.ArgumentParser()
        add_config_arguments(parser)
        try:
            load_config(parser.parse_args(["--config", str(path), *argv]), environ or {})
        except ConfigError as error:
            return str(error)
        return None


@SOME
@given(st.sampled_from(sorted(BY_KEY)), toml_values, st.sets(st.sampled_from(sorted(GOOD_VALUES))))
def test_a_bad_value_in_the_file_is_a_config_error_naming_its_key(
    key: str, value: object, others: set[str]
) -> None:
    """Every real key given a wrong-typed or out-of-range value (beside good values for other keys)."""
    entries = {name: GOOD_VALUES[name] for name in others if name != key}
    entries[key] = value
    message = _load(_document(entries))
    assert message is None or key in message, message


@SOME
@given(
    st.dictionaries(
        st.sampled_from([*sorted(BY_KEY), *sorted(SECTIONS)]) | clean_text.filter(lambda k: k not in BY_KEY),
        toml_values,
        min_size=1,
        max_size=4,
    )
)
def test_unknown_keys_and_misplaced_tables_are_config_errors_naming_a_key(entries: dict[str, object]) -> None:
    """Unknown keys (top-level or in a table), tables where values belong and values where tables do."""
    lines = [f"{_string(key)} = {_toml(value)}" for key, value in entries.items()]
    message = _load("\n".join(lines) + "\n")
    assert message is None or any(key in message or repr(key) in message for key in entries), message


@SOME
@given(
    st.one_of(
        st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")), st.binary(max_size=200)
    )
)
def test_any_file_contents_load_or_are_a_config_error_naming_the_file(raw: bytes) -> None:
    message = _load(raw)
    assert message is None or "config.toml" in message


@pytest.mark.parametrize(
    ("contents", "expected"),
    [
        ('listen = "127.0.0.1:\u00b2"', "listen"),  # int("²") raised ValueError out of the loader
        ('[metadata]\nhost = "h:\u00b3"', "metadata.host"),
        ('state_dir = "/var/lib/a\\u0000b"', "state_dir"),  # accepted; os.makedirs raised ValueError later
        ('[devices]\nextra_paths = ["/tmp/a\\u0000"]', "devices.extra_paths"),
        ("state_dir = " + "[" * 600 + "]" * 600, "nested too deeply"),  # RecursionError in tomllib
    ],
)
def test_inputs_that_used_to_escape_the_loader(contents: str, expected: str) -> None:
    # The deepest input parses at the recursion limit. A garbage collection there would run the finalizers
    # of what earlier tests in this process left (an urllib3 pool's, in a parallel run) at that depth: a
    # RecursionError in them, "Exception ignored". So the garbage goes first, and none is collected meanwhile.
    gc.collect()
    gc.disable()
    try:
        message = _load(contents)
    finally:
        gc.enable()
    assert message is not None
    assert expected in message


@SOME
@given(
    st.sampled_from(sorted(BY_ENV)),
    st.text(max_size=40) | st.sampled_from(["[" * 600, "1.2.3.4:\u00b2", "nan"]),
)
def test_any_environment_value_is_a_config_error_naming_variable_and_key(name: str, value: str) -> None:
    message = _load("", {name: value})
    assert message is None or (name in message and BY_ENV[name].key in message), message


@FEW
@given(st.lists(st.text(max_size=12), min_size=1, max_size=3))
def test_any_exclude_flag_is_a_config_error_naming_the_flag(values: list[str]) -> None:
    message = _load("", None, *(f"--exclude={value}" for value in values))
    assert message is None or "--exclude" in message


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
        result = HolderScanner(patterns=[str(device)], proc_root=str(Path(top) / "proc")).scan()
        assert [h.pid for h in result.holders] == [50]


def test_a_deleted_node_seen_through_another_path_is_held_by_device_number(tmp_path: Path) -> None:
    """ " (deleted)" is part of the link's path; the stat through the fd finds the device by its numbers."""
    device = make_device(tmp_path)
    elsewhere = tmp_path / "old"
    elsewhere.mkdir()
    ghost = make_device(elsewhere, "accel0 (deleted)")  # what the fd's link names: the same device numbers
    tree = ProcTree(tmp_path / "proc")
    tree.add(60, fds={3: str(ghost)})
    result = HolderScanner(patterns=[str(device)], proc_root=str(tmp_path / "proc")).scan()
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
        result = HolderScanner(patterns=[str(device)]).scan()
        held = {h.pid: h.devices for h in result.holders}
        assert held.get(child.pid) == (f"{device} (deleted)",)
    finally:
        child.kill()
        child.communicate()


# --- the command line -------------------------------------------------------------------------------
BAD_USAGE = {
    "run": [["--metadata-timeout-sec", "abc"], ["--config"]],
    "status": [["--json=yes"], ["--config"]],
    "history": [["--limit", "x"], ["--limit"]],
    "holders": [["--proc-root"], ["--json=1"]],
    "drill": [["--dry-run=no"], ["--grace"]],
    "readiness": [["--json=yes"], ["--device"]],
    "config": [["--json=x"], ["--device"]],
    "watch": [["--timeout-sec", "soon"], ["--metadata-host"]],
    "fake-metadata": [["--at", "5s"], ["--listen"]],
    "demo": [["--keep=yes"]],
}
CASES = [
    (command, argv) for command, bad in BAD_USAGE.items() for argv in [["--no-such-flag"], ["stray"], *bad]
]


def _cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TPU_WATCHDOG_")}
    return subprocess.run(
        [CLI, *argv], capture_output=True, text=True, timeout=60, check=False, env={**clean, **(env or {})}
    )


def test_every_command_is_covered() -> None:
    listed = _cli("--help").stdout
    assert set(BAD_USAGE) == set(COMMANDS)
    assert all(command in listed for command in COMMANDS)


@pytest.mark.parametrize(("command", "argv"), CASES, ids=[f"{c}:{' '.join(a)}" for c, a in CASES])
def test_bad_usage_exits_2_with_usage_and_no_traceback(command: str, argv: list[str]) -> None:
    done = _cli(command, *argv)
    assert done.returncode == 2, done.stderr
    assert f"usage: tpu-watchdog {command}" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("command", "contents", "argv", "expected"),
    [
        ("config", "[drain]\nmaintenance_grace = -1\n", [], ["drain.maintenance_grace", "negative"]),
        ("run", "[drain]\ngrace = 5\n", [], ["'drain.grace'", "did you mean", "maintenance_grace"]),
        ("run", 'listen = "127.0.0.1:\u00b2"\n', [], ["listen", "port"]),
        ("config", "", ["--exclude", "pid:\u00b2"], ["--exclude", "whole number"]),
        ("run", 'state_dir = "/var/lib/\\u0000"\n', [], ["state_dir", "NUL"]),
    ],
)
def test_bad_configuration_exits_78_naming_the_key(
    tmp_path: Path, command: str, contents: str, argv: list[str], expected: list[str]
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(contents)
    done = _cli(command, "--config", str(path), *argv)
    assert done.returncode == 78, done.stderr
    assert "Traceback" not in done.stderr
    for text in expected:
        assert text in done.stderr
