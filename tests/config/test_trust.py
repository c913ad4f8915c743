"""Hooks run as root: a file naming them, or a hook executable, that anyone else can change is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from watchdog.config.settings import ConfigError, load_config
from watchdog.config.trust import untrusted_because

# -- the rule ------------------------------------------------------------------------------------------------


def stat_of(mode: int, uid: int) -> os.stat_result:
    """A stat result with only the mode and owner that matter here."""
    return os.stat_result((mode, 0, 0, 1, uid, 0, 0, 0, 0, 0))


@pytest.mark.parametrize(
    ("mode", "uid", "euid", "expected"),
    [
        (0o100644, 0, 0, None),
        (0o100755, 0, 1000, None),  # root's file: an unprivileged daemon trusts root anyway
        (0o100644, 1000, 1000, None),  # the daemon's own user
        (0o040755, 1000, 0, "/x is owned by uid 1000 (fix: chown root /x)"),
        (0o100644, 1001, 1000, "/x is owned by uid 1001 (fix: chown 1000 /x)"),
        (0o100664, 0, 0, "/x is group-writable (fix: chmod go-w /x)"),
        (0o041777, 0, 0, "/x is group- and other-writable (fix: chmod go-w /x)"),  # sticky or not
        (0o100602, 7, 0, "/x is owned by uid 7 and other-writable (fix: chown root /x && chmod go-w /x)"),
    ],
)
def test_untrusted_because_says_what_is_wrong_and_the_fix(
    mode: int, uid: int, euid: int, expected: str | None
) -> None:
    assert untrusted_because("/x", stat_of(mode, uid), euid=euid) == expected


def test_untrusted_because_reads_real_files(tmp_path: Path) -> None:
    path = tmp_path / "a hook"
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    assert untrusted_because(str(path)) is None
    os.chown(path, 1000, -1)
    assert untrusted_because(str(path)) == f"{path} is owned by uid 1000 (fix: chown root '{path}')"
    assert untrusted_because(str(path), euid=1000) is None
    path.chmod(0o775)
    assert "group-writable" in (untrusted_because(str(path), euid=1000) or "")
    with pytest.raises(FileNotFoundError):
        untrusted_because(str(tmp_path / "absent"))


# -- the loader applies it: to a file naming hooks, and to each hook -----------------------------------------

HOOKED = '[hooks]\non_event_start = ["/bin/true"]\n'


def hooked_file(tmp_path: Path, text: str = HOOKED) -> Path:
    """A config file in a directory of its own, both root's and 0755/0644 (tmp_path itself is 0700)."""
    directory = tmp_path / "etc"
    directory.mkdir(mode=0o755)
    path = directory / "config.toml"
    path.write_text(text)
    path.chmod(0o644)
    return path


def refused(path: Path, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as raised:
        load_config(Namespace(config=str(path)), environ or {})
    return str(raised.value)


def test_a_root_owned_hooks_file_is_trusted(tmp_path: Path) -> None:
    assert load_config(Namespace(config=str(hooked_file(tmp_path))), {}).hook_on_event_start == ("/bin/true",)


@pytest.mark.parametrize(
    ("mode", "owner", "expected"),
    [
        (0o664, 0, ["group-writable", "chmod go-w"]),
        (0o646, 0, ["other-writable", "chmod go-w"]),
        (0o666, 0, ["group- and other-writable"]),
        (0o644, 1000, ["owned by uid 1000", "chown root"]),
        (0o664, 1000, ["owned by uid 1000 and group-writable", "chown root", "&& chmod go-w"]),
    ],
)
def test_a_hooks_file_others_can_write_is_refused(
    tmp_path: Path, mode: int, owner: int, expected: list[str]
) -> None:
    path = hooked_file(tmp_path)
    path.chmod(mode)
    os.chown(path, owner, -1)
    message = refused(path)
    assert message.startswith(f"{path}: hooks.on_event_start: refused: hooks run as root, and {path} is ")
    for fragment in expected:
        assert fragment in message
    assert f" {path})" in message  # the fix names the path


@pytest.mark.parametrize(
    ("mode", "owner", "expected"), [(0o775, 0, "group-writable"), (0o755, 1000, "uid 1000")]
)
def test_a_hooks_file_in_a_directory_others_can_write_is_refused(
    tmp_path: Path, mode: int, owner: int, expected: str
) -> None:
    path = hooked_file(tmp_path)
    path.parent.chmod(mode)
    os.chown(path.parent, owner, -1)
    message = refused(path)
    assert f"{path.parent} is " in message
    assert expected in message


def test_a_symlinked_hooks_file_is_judged_where_it_really_is(tmp_path: Path) -> None:
    real = hooked_file(tmp_path)
    real.parent.chmod(0o777)  # the unsafe directory under test
    trusted = tmp_path / "trusted"
    trusted.mkdir(mode=0o755)
    (trusted / "config.toml").symlink_to(real)
    assert f"{real.parent} is group- and other-writable" in refused(trusted / "config.toml")


def test_a_file_without_hooks_is_never_refused_for_its_permissions(tmp_path: Path) -> None:
    path = hooked_file(tmp_path, "[hooks]\ntimeout = 5\non_drain_end = []\n")
    path.chmod(0o666)  # writable by all, and harmless: it names no command
    path.parent.chmod(0o777)
    os.chown(path, 1000, -1)
    assert load_config(Namespace(config=str(path)), {}).hook_timeout == 5


@pytest.mark.parametrize(
    ("mode", "owner", "expected"),
    [
        (0o775, 0, "group-writable (fix: chmod go-w"),
        (0o757, 0, "other-writable"),
        (0o755, 1000, "owned by uid 1000 (fix: chown root"),
        (None, 0, "does not exist (install it, or correct the path)"),
    ],
)
def test_a_hook_executable_others_can_replace_is_refused(
    tmp_path: Path, mode: int | None, owner: int, expected: str
) -> None:
    tool = tmp_path / "notify me"
    if mode is not None:
        tool.write_text("#!/bin/sh\n")
        tool.chmod(mode)
        os.chown(tool, owner, -1)
    path = hooked_file(tmp_path, f"[hooks]\non_drain_end = [{json.dumps(str(tool))}, '--page']\n")
    message = refused(path)
    assert message.startswith(f"{path}: hooks.on_drain_end: refused: the hook runs as root, and {tool}")
    assert expected in message
    assert "'" + str(tmp_path) in message or mode is None  # the fix quotes a path with a space


def test_a_hook_executable_from_the_environment_is_checked_too(tmp_path: Path) -> None:
    tool = tmp_path / "hook"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o777)  # the unsafe executable under test
    with pytest.raises(ConfigError) as raised:
        load_config(Namespace(), {"TPU_WATCHDOG_HOOKS_ON_EVENT_CLEAR": str(tool)})
    expected = "environment TPU_WATCHDOG_HOOKS_ON_EVENT_CLEAR: hooks.on_event_clear: refused"
    assert str(raised.value).startswith(expected)
    tool.chmod(0o755)
    config = load_config(Namespace(), {"TPU_WATCHDOG_HOOKS_ON_EVENT_CLEAR": f"{tool} --x"})
    assert config.hook_on_event_clear == (str(tool), "--x")


def test_untrusted_hooks_file_exits_78_from_the_cli(tmp_path: Path) -> None:
    path = hooked_file(tmp_path)
    path.chmod(0o664)
    done = subprocess.run(
        [str(Path(sys.executable).parent / "tpu-watchdog"), "run", "--config", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("TPU_WATCHDOG_")},
    )  # fmt: skip
    assert done.returncode == 78, done.stderr
    assert f"{path} is group-writable (fix: chmod go-w {path})" in done.stderr
    assert "Traceback" not in done.stderr
