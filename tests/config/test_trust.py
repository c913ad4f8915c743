"""Only root may direct the daemon: a configuration file, or a file a hook names, that anyone else could
change is refused (sshd's StrictModes), and so is a hook that hands a shell a string."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from watchdog.config.settings import ConfigError, load_config
from watchdog.config.trust import hook_refusal, path_refusal, untrusted_because

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
        (0o041777, 0, 0, "/x is group- and other-writable (fix: chmod go-w /x)"),  # sticky: see sticky_ok
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


def test_a_sticky_directory_is_excused_only_when_asked() -> None:
    assert untrusted_because("/tmp", stat_of(0o041777, 0), euid=0, sticky_ok=True) is None
    assert untrusted_because("/x", stat_of(0o040777, 0), euid=0, sticky_ok=True) is not None  # not sticky
    assert untrusted_because("/x", stat_of(0o041777, 1000), euid=0, sticky_ok=True) == (
        "/x is owned by uid 1000 (fix: chown root /x)"  # its owner may remove anything in it
    )


# -- the whole path: the file and every directory above it ---------------------------------------------------

USER = 1000  # another user: os.chown to it works as root, and the suite runs as root


def own_dir(parent: Path, name: str, mode: int = 0o755, owner: int = 0) -> Path:
    directory = parent / name
    directory.mkdir()
    directory.chmod(mode)  # mkdir's mode is masked by the umask, chmod's is not
    os.chown(directory, owner, -1)
    return directory


def own_file(path: Path, text: str = "", mode: int = 0o644, owner: int = 0) -> Path:
    path.write_text(text)
    path.chmod(mode)
    os.chown(path, owner, -1)
    return path


def test_a_directory_far_above_the_file_counts_too(tmp_path: Path) -> None:
    top = own_dir(tmp_path, "top", owner=USER)
    path = own_file(own_dir(own_dir(top, "a"), "b") / "config.toml")
    assert path_refusal(str(path)) == f"{top} is owned by uid {USER} (fix: chown root {top})"


def test_a_sticky_directory_is_accepted_above_a_trusted_name_only(tmp_path: Path) -> None:
    """/tmp's rule: others may add names in a sticky directory, never rename or remove root's."""
    sticky = own_dir(tmp_path, "sticky", mode=0o1777)
    assert path_refusal(str(own_file(sticky / "root.toml"))) is None
    mine = own_file(sticky / "user.toml", owner=USER)
    assert path_refusal(str(mine)) == f"{mine} is owned by uid {USER} (fix: chown root {mine})"
    assert (
        path_refusal(str(sticky / "absent"))
        == f"{sticky / 'absent'} does not exist (install it, or correct the path)"
    )
    # a name that does not exist yet is anyone's to create there
    assert path_refusal(str(sticky / "absent"), may_be_missing=True) == (
        f"{sticky} is group- and other-writable (fix: chmod go-w {sticky})"
    )
    plain = own_dir(tmp_path, "plain", mode=0o777)
    assert "other-writable" in (path_refusal(str(own_file(plain / "x.toml"))) or "")


def test_a_symlink_is_judged_as_named_and_where_it_points(tmp_path: Path) -> None:
    real = own_file(own_dir(tmp_path, "real", owner=USER) / "config.toml")
    link = own_dir(tmp_path, "etc") / "config.toml"
    link.symlink_to(real)
    assert path_refusal(str(link)) == f"{real.parent} is owned by uid {USER} (fix: chown root {real.parent})"
    sticky = own_dir(tmp_path, "sticky", mode=0o1777)
    theirs = sticky / "theirs.toml"
    theirs.symlink_to(own_file(own_dir(tmp_path, "good") / "config.toml"))
    assert path_refusal(str(theirs)) is None
    os.lchown(theirs, USER, -1)  # its owner may replace it, in a sticky directory too
    assert (
        path_refusal(str(theirs))
        == f"{theirs} is a symlink owned by uid {USER} (fix: chown -h root {theirs})"
    )


# -- the loader applies it to the file it reads, whatever the file holds -------------------------------------

HOOKED = '[hooks]\non_event_start = ["/bin/true"]\n'


def hooked_file(tmp_path: Path, text: str = HOOKED) -> Path:
    """A config file in a directory of its own, both root's and 0755/0644 (tmp_path itself is 0700)."""
    return own_file(own_dir(tmp_path, "etc") / "config.toml", text)


def refused(path: Path, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as raised:
        load_config(Namespace(config=str(path)), environ or {})
    return str(raised.value)


def test_a_root_owned_file_is_trusted(tmp_path: Path) -> None:
    assert load_config(Namespace(config=str(hooked_file(tmp_path))), {}).hook_on_event_start == ("/bin/true",)


def test_a_file_under_a_sticky_tmp_directory_is_trusted_when_it_is_roots(tmp_path: Path) -> None:
    path = own_file(own_dir(tmp_path, "tmp", mode=0o1777) / "config.toml", "[drain]\nmaintenance_grace = 9\n")
    assert load_config(Namespace(config=str(path)), {}).maintenance_grace == 9


FAKE_HOST = """[metadata]
host = "127.0.0.1:8053"
[devices]
extra_paths = ["/dev/kmsg"]
[drain]
maintenance_grace = 0
"""


@pytest.mark.parametrize("how", ["--config", "TPU_WATCHDOG_CONFIG"])
def test_a_world_writable_file_owned_by_a_user_is_refused_though_it_names_no_hook(
    tmp_path: Path, how: str
) -> None:
    """It was loaded: that user's fake metadata server, /dev/kmsg's holders drained, no grace."""
    path = own_file(own_dir(tmp_path, "etc") / "config.toml", FAKE_HOST, mode=0o666, owner=USER)
    args, environ = (
        (Namespace(config=str(path)), {}) if how == "--config" else (Namespace(), {how: str(path)})
    )
    with pytest.raises(ConfigError) as raised:
        load_config(args, environ)
    assert str(raised.value) == (
        f"{path}: refused: it directs a daemon running as root, and {path} is owned by uid {USER} and group- "
        f"and other-writable (fix: chown root {path} && chmod go-w {path})"
    )


@pytest.mark.parametrize(
    ("mode", "owner", "expected"),
    [
        (0o664, 0, ["group-writable", "chmod go-w"]),
        (0o646, 0, ["other-writable", "chmod go-w"]),
        (0o644, USER, [f"owned by uid {USER}", "chown root"]),
    ],
)
def test_a_file_others_can_write_is_refused(
    tmp_path: Path, mode: int, owner: int, expected: list[str]
) -> None:
    path = own_file(own_dir(tmp_path, "etc") / "config.toml", "log_level = 'debug'\n", mode=mode, owner=owner)
    message = refused(path)
    assert message.startswith(f"{path}: refused: it directs a daemon running as root, and {path} is ")
    for fragment in expected:
        assert fragment in message


@pytest.mark.parametrize(
    ("mode", "owner", "expected"), [(0o775, 0, "group-writable"), (0o755, USER, "uid 1000")]
)
def test_a_file_in_a_directory_others_can_write_is_refused(
    tmp_path: Path, mode: int, owner: int, expected: str
) -> None:
    path = hooked_file(tmp_path)
    path.parent.chmod(mode)
    os.chown(path.parent, owner, -1)
    message = refused(path)
    assert f"{path.parent} is " in message
    assert expected in message


def test_dev_null_is_the_empty_configuration() -> None:
    assert load_config(Namespace(config=os.devnull), {}).config_file == os.devnull


# -- and to every file each hook names -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "owner", "expected"),
    [
        (0o775, 0, "group-writable (fix: chmod go-w"),
        (0o757, 0, "other-writable"),
        (0o755, USER, f"owned by uid {USER} (fix: chown root"),
        (None, 0, "does not exist (install it, or correct the path)"),
    ],
)
def test_a_hook_executable_others_can_replace_is_refused(
    tmp_path: Path, mode: int | None, owner: int, expected: str
) -> None:
    tool = tmp_path / "notify me"
    if mode is not None:
        own_file(tool, "#!/bin/sh\n", mode=mode, owner=owner)
    path = hooked_file(tmp_path, f"[hooks]\non_drain_end = [{json.dumps(str(tool))}, '--page']\n")
    message = refused(path)
    assert message.startswith(f"{path}: hooks.on_drain_end: refused: the hook runs as root, and {tool}")
    assert expected in message
    assert "'" + str(tmp_path) in message or mode is None  # the fix quotes a path with a space


def hook_refused(argv: list[str]) -> str:
    """The loader's refusal of `argv` as a hook, given as root gives it: in the environment."""
    with pytest.raises(ConfigError) as raised:
        load_config(Namespace(), {"TPU_WATCHDOG_HOOKS_ON_DRAIN_END": json.dumps(argv)})
    origin = "environment TPU_WATCHDOG_HOOKS_ON_DRAIN_END: hooks.on_drain_end"
    prefix = f"{origin}: refused: the hook runs as root, and "
    assert str(raised.value).startswith(prefix)
    return str(raised.value).removeprefix(prefix)


def test_an_interpreters_script_others_can_write_is_refused(tmp_path: Path) -> None:
    """["/bin/sh", script] was accepted: only argv[0] was checked."""
    script = own_file(own_dir(tmp_path, "x") / "user.sh", "#!/bin/sh\n", mode=0o666, owner=USER)
    assert hook_refused(["/bin/sh", str(script)]) == (
        f"{script} is owned by uid {USER} and group- and other-writable "
        f"(fix: chown root {script} && chmod go-w {script})"
    )
    own_file(script, "#!/bin/sh\n", mode=0o755)
    assert hook_refusal(["/bin/sh", str(script)]) is None


def test_a_root_owned_executable_in_a_users_directory_is_refused(tmp_path: Path) -> None:
    """The user may rename it away and put their own in its place."""
    theirs = own_dir(tmp_path, "theirs", owner=USER)
    tool = own_file(theirs / "notify", "#!/bin/sh\n", mode=0o755)
    assert hook_refused([str(tool)]) == f"{theirs} is owned by uid {USER} (fix: chown root {theirs})"


@pytest.mark.parametrize(
    "argv",
    [
        ["sh", "-c", "echo hi"],
        ["/bin/sh", "-c", "echo hi"],
        ["/bin/bash", "-xc", "echo hi"],
        ["/bin/bash", "-o", "posix", "-e", "-c", "echo hi"],
        ["/usr/bin/env", "sh", "-c", "echo hi"],
        ["/usr/bin/env", "-S", "sh -c 'echo hi'"],
        ["/usr/bin/python3", "-c", "print(1)"],
        ["/usr/bin/perl", "-e", "print 1"],
    ],
)
def test_a_shell_string_is_refused_with_the_reason(argv: list[str]) -> None:
    because = hook_refused(argv)
    assert "runs text as code, which no file permission can vouch for" in because
    assert "root-owned script" in because


@pytest.mark.parametrize(
    "argv",
    [
        ["true"],  # on PATH: /usr/bin/true
        ["/bin/sh", "/usr/bin/which", "-c"],  # after the script, -c is the script's own option
        ["/usr/bin/logger", "-t", "tpu watchdog", "https://hooks.example.com/x/y", "text/plain"],
        ["/usr/bin/env", "LANG=C", "/bin/true"],
        ["/usr/bin/python3", "-Wonce", "-X", "code", "/usr/bin/which"],  # -W's and -X's arguments, no -c
        ["/bin/true", "--config=/etc/hostname"],
    ],
)
def test_hooks_that_name_only_trusted_files_are_accepted(argv: list[str]) -> None:
    assert hook_refusal(argv) is None


def test_a_relative_word_counts_when_it_names_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook starts in the daemon's working directory: "x/user.sh" there is that file."""
    own_file(own_dir(tmp_path, "x") / "user.sh", "#!/bin/sh\n", mode=0o666)
    monkeypatch.chdir(tmp_path)
    assert "x/user.sh is group- and other-writable" in hook_refused(["/bin/sh", "x/user.sh"])
    assert hook_refusal(["/usr/bin/curl", "-H", "Content-Type: application/json", "-d", "x/absent"]) is None


def test_every_file_a_hook_names_counts_and_a_missing_one_by_its_directory(tmp_path: Path) -> None:
    theirs = own_dir(tmp_path, "theirs", owner=USER)
    assert f"{theirs} is owned by uid {USER}" in (hook_refusal(["/bin/true", f"--config={theirs}/c"]) or "")
    sticky = own_dir(tmp_path, "tmp", mode=0o1777)
    assert "other-writable" in (hook_refusal(["/bin/true", str(sticky / "not-yet")]) or "")
    assert hook_refusal(["no-such-command-here"]) == (
        "no-such-command-here is not found on PATH (install it, or give its absolute path)"
    )


def test_a_shell_string_from_the_environment_is_refused() -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(Namespace(), {"TPU_WATCHDOG_HOOKS_ON_EVENT_START": "sh -c 'echo $TPU_WATCHDOG_EVENT'"})
    assert str(raised.value).startswith(
        "environment TPU_WATCHDOG_HOOKS_ON_EVENT_START: hooks.on_event_start: refused: the hook runs as "
        "root, and `sh -c` runs text as code"
    )


def test_a_hook_executable_from_the_environment_is_checked_too(tmp_path: Path) -> None:
    tool = own_file(tmp_path / "hook", "#!/bin/sh\n", mode=0o777)  # the unsafe executable under test
    with pytest.raises(ConfigError) as raised:
        load_config(Namespace(), {"TPU_WATCHDOG_HOOKS_ON_EVENT_CLEAR": str(tool)})
    expected = "environment TPU_WATCHDOG_HOOKS_ON_EVENT_CLEAR: hooks.on_event_clear: refused"
    assert str(raised.value).startswith(expected)
    tool.chmod(0o755)
    config = load_config(Namespace(), {"TPU_WATCHDOG_HOOKS_ON_EVENT_CLEAR": f"{tool} --x"})
    assert config.hook_on_event_clear == (str(tool), "--x")


def test_an_untrusted_file_exits_78_from_the_cli(tmp_path: Path) -> None:
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
