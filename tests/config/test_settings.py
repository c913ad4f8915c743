"""Configuration: the precedence of its sources, provenance, and every kind of bad input as a ConfigError."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import pytest

from watchdog.config.schema import SETTINGS
from watchdog.config.settings import (
    Config,
    ConfigError,
    Source,
    add_config_arguments,
    as_dict,
    default_config,
    load_config,
    load_config_or_exit,
)
from watchdog.config.values import Address
from watchdog.exitcodes import EXIT_CONFIG


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    return parser.parse_args(list(argv))


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return str(path)


def test_defaults_when_the_default_file_is_missing() -> None:
    config = load_config(parse(), {})
    assert config == default_config()
    assert config.config_file is None
    assert config.maintenance_grace == 300
    assert config.preemption_grace == 25
    assert config.devices == ("/dev/accel*", "/dev/vfio/*")
    assert config.listen == Address("127.0.0.1", 9478)
    assert config.on_timeout == "kill"
    assert config.migrate_action == "ignore"
    assert config.unknown_event_action == "drain"
    assert config.drain_before_window is None
    assert config.hook_timeout == 30
    assert all(config.source(s.key) == Source("default") for s in SETTINGS)


def test_every_setting_has_a_config_field_of_the_default_type() -> None:
    fields = {f.name for f in dataclasses.fields(Config)}
    assert {s.attr for s in SETTINGS} == fields - {"config_file", "sources", "warnings"}
    assert len({s.env for s in SETTINGS}) == len(SETTINGS)


@pytest.mark.parametrize(
    ("layers", "expected_grace", "expected_source"),
    [
        ((), 300.0, Source("default")),
        (("file",), 100.0, "file"),
        (("file", "env"), 200.0, Source("env", "TPU_WATCHDOG_DRAIN_MAINTENANCE_GRACE")),
        (("file", "env", "flag"), 250.5, Source("flag", "--grace")),
        (("env", "flag"), 250.5, Source("flag", "--grace")),
        (("file", "flag"), 250.5, Source("flag", "--grace")),
    ],
)
def test_precedence_default_file_env_flag(
    tmp_path: Path, layers: tuple[str, ...], expected_grace: float, expected_source: Source | str
) -> None:
    path = write(tmp_path, "[drain]\nmaintenance_grace = 100\n")
    argv = ["--config", path] if "file" in layers else []
    if "flag" in layers:
        argv += ["--grace", "250.5"]
    environ = {"TPU_WATCHDOG_DRAIN_MAINTENANCE_GRACE": "200"} if "env" in layers else {}
    config = load_config(parse(*argv), environ)
    assert config.maintenance_grace == expected_grace
    source = config.source("drain.maintenance_grace")
    assert source == (Source("file", path) if expected_source == "file" else expected_source)
    assert config.source("drain.preemption_grace") == Source("default")


def test_every_layer_keeps_its_own_provenance(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'log_level = "debug"\n[drain]\npreemption_grace = 20\non_timeout = "leave"\n'
        '[hooks]\non_event_start = ["/bin/true", "start"]\n',
    )
    config = load_config(
        parse("--on-timeout", "kill", "--state-dir", str(tmp_path)),
        {
            "TPU_WATCHDOG_CONFIG": path,
            "TPU_WATCHDOG_LOG_LEVEL": "WARNING",
            "TPU_WATCHDOG_EVENTS_MIGRATE": "drain",
        },
    )
    assert config.config_file == path
    assert (config.log_level, str(config.source("log_level"))) == ("warning", "env TPU_WATCHDOG_LOG_LEVEL")
    assert (config.preemption_grace, config.source("drain.preemption_grace")) == (20, Source("file", path))
    assert (config.on_timeout, str(config.source("drain.on_timeout"))) == ("kill", "flag --on-timeout")
    assert (config.migrate_action, config.source("events.migrate").kind) == ("drain", "env")
    assert config.state_dir == str(tmp_path)
    assert config.hook_on_event_start == ("/bin/true", "start")
    assert as_dict(config)["drain.on_timeout"] == {
        "value": "kill", "source": "flag", "where": "--on-timeout", "env": "TPU_WATCHDOG_DRAIN_ON_TIMEOUT",
        "flag": "--on-timeout",
    }  # fmt: skip


def test_list_flags_and_excludes(tmp_path: Path) -> None:
    path = write(tmp_path, '[exclude]\npids = [7]\nnames = ["sshd"]\nuids = [1000]\n')
    config = load_config(
        parse("--config", path, "--device", "/dev/accel0", "--device", "/dev/vfio/1",
              "--exclude", "pid:42", "--exclude", "pid:43", "--exclude", "name:node_exporter", "--dry-run"),
        {},
    )  # fmt: skip
    assert config.devices == ("/dev/accel0", "/dev/vfio/1")
    assert config.exclude_pids == (42, 43)  # a kind given on the command line replaces the file's list
    assert config.exclude_names == ("node_exporter",)
    assert config.exclude_uids == (1000,)  # a kind not given keeps the file's list
    assert config.source("exclude.uids") == Source("file", path)
    assert config.dry_run is True


def test_environment_lists_booleans_and_hooks(tmp_path: Path) -> None:
    path = write(tmp_path, 'dry_run = true\n[hooks]\non_drain_end = ["/usr/local/bin/report"]\n')
    config = load_config(
        parse("--config", path),
        {
            "TPU_WATCHDOG_DEVICES_PATTERNS": "/dev/accel*, /dev/vfio/*,/dev/x",
            "TPU_WATCHDOG_EXCLUDE_UIDS": "[0, 1000]",
            "TPU_WATCHDOG_DRY_RUN": "off",
            "TPU_WATCHDOG_HOOKS_ON_EVENT_START": "/usr/bin/logger -t 'tpu watchdog'",
            "TPU_WATCHDOG_HOOKS_ON_DRAIN_END": "",  # empty: no hook, overriding the file
            "TPU_WATCHDOG_UPCOMING_MAINTENANCE_DRAIN_BEFORE_WINDOW": "600",
            "TPU_WATCHDOG_EVENT": "maintenance-event=NONE",  # a hook's variable, not a setting: ignored
        },
    )
    assert config.devices == ("/dev/accel*", "/dev/vfio/*", "/dev/x")
    assert config.exclude_uids == (0, 1000)
    assert config.dry_run is False
    assert config.hook_on_event_start == ("/usr/bin/logger", "-t", "tpu watchdog")
    assert config.hook_on_drain_end is None
    assert config.drain_before_window == 600


def test_zero_drain_before_window_is_off(tmp_path: Path) -> None:
    path = write(tmp_path, "[upcoming_maintenance]\ndrain_before_window = 0\ndrain_when_ongoing = true\n")
    config = load_config(parse("--config", path), {})
    assert config.drain_before_window is None
    assert config.drain_when_ongoing is True


# -- bad configurations: each message names where, the key, and what is allowed ---------------------------

BAD_FILES = [
    ("[drain]\nmaintenance_grce = 5\n", ["drain.maintenance_grce", "did you mean 'drain.maintenance_grace'"]),
    ("grace = 5\n", ["unknown key 'grace'", "did you mean 'drain.maintenance_grace'"]),
    ("[drian]\non_timeout = 'kill'\n", ["unknown key 'drian'", "did you mean 'drain'"]),
    ("[drain]\nmaintenance_grace = -1\n", ["drain.maintenance_grace", "-1 is negative", "allowed: seconds"]),
    ("[drain]\npreemption_grace = '25'\n", ["drain.preemption_grace", "a string, not a number", "allowed"]),
    ("[drain]\nmaintenance_grace = true\n", ["drain.maintenance_grace", "a boolean", "allowed"]),
    ("[drain]\non_timeout = 'wait'\n", ["drain.on_timeout", '"wait"', "allowed: kill | leave"]),
    ("[events]\nmigrate = 'evacuate'\n", ["events.migrate", "allowed: ignore | drain"]),
    ("listen = '127.0.0.1'\n", ["listen", "has no port", "HOST:PORT"]),
    ("listen = '127.0.0.1:99999'\n", ["listen", "65535"]),
    ("listen = 'bad host:80'\n", ["listen", "not a host name"]),
    ("log_level = 'verbose'\n", ["log_level", "allowed: debug | info | warning | error"]),
    ("dry_run = 'yes'\n", ["dry_run", "not true or false"]),
    ("[devices]\npatterns = []\n", ["devices.patterns", "empty list", "non-empty list"]),
    ("[devices]\npatterns = ['dev/accel*']\n", ["devices.patterns", "not an absolute path"]),
    ("[exclude]\npids = [0]\n", ["exclude.pids", "less than 1"]),
    ("[exclude]\nuids = ['root']\n", ["exclude.uids", "not an integer"]),
    ("[hooks]\non_event_start = '/bin/notify --x'\n", ["hooks.on_event_start", "not a list", "no shell"]),
    ("[hooks]\ntimeout = 0\n", ["hooks.timeout", "0 is not allowed", "> 0"]),
    ("[metadata]\nhost = 'http://169.254.169.254'\n", ["metadata.host", "scheme"]),
    ("drain = 5\n", ["drain", "must be a table"]),
    ("[drain\nmaintenance_grace = 5\n", ["not valid TOML", "line 1"]),
    ("[drain]\nmaintenance_grace = 5\nmaintenance_grace = 6\n", ["not valid TOML"]),
]


@pytest.mark.parametrize(("text", "expected"), BAD_FILES)
def test_bad_file_is_a_config_error_naming_file_key_and_allowed(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as raised:
        load_config(parse("--config", path), {})
    message = str(raised.value)
    assert message.startswith(path + ":")
    for fragment in expected:
        assert fragment in message


def test_a_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b"log_level = '\xff'\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(parse("--config", str(path)), {})


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (["--config", "/nonexistent/tpu.toml"], {}, ["/nonexistent/tpu.toml", "not found", "flag --config"]),
        ([], {"TPU_WATCHDOG_CONFIG": "/nonexistent/x.toml"}, ["not found", "env TPU_WATCHDOG_CONFIG"]),
    ],
)
def test_an_explicitly_named_missing_file_is_an_error(
    argv: list[str], environ: dict[str, str], expected: list[str]
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(parse(*argv), environ)
    for fragment in expected:
        assert fragment in str(raised.value)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"TPU_WATCHDOG_DRAIN_MAINTENANCE_GRACE": "-5"}, ["environment TPU_WATCHDOG_DRAIN_MAINTENANCE_GRACE",
                                                          "drain.maintenance_grace", "negative", ">= 0"]),
        ({"TPU_WATCHDOG_DRAIN_MAINTENANCE_GRACE": "five"}, ["not a number of seconds"]),
        ({"TPU_WATCHDOG_DRAIN_PREEMPTION_GRACE": "nan"}, ["not a finite number"]),
        ({"TPU_WATCHDOG_DRY_RUN": "maybe"}, ["TPU_WATCHDOG_DRY_RUN", "not a boolean", "true | false"]),
        ({"TPU_WATCHDOG_GRACE": "5"}, ["unknown variable TPU_WATCHDOG_GRACE",
                                       "did you mean 'TPU_WATCHDOG_DRAIN_MAINTENANCE_GRACE'"]),
        ({"TPU_WATCHDOG_LOGLEVEL": "info"}, ["did you mean 'TPU_WATCHDOG_LOG_LEVEL'"]),
        ({"TPU_WATCHDOG_EXCLUDE_PIDS": "1,two"}, ["exclude.pids", "not a list of integers"]),
        ({"TPU_WATCHDOG_HOOKS_ON_EVENT_START": "/bin/x 'unclosed"}, ["cannot be split"]),
    ],
)  # fmt: skip
def test_bad_environment_is_a_config_error(environ: dict[str, str], expected: list[str]) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(parse(), environ)
    for fragment in expected:
        assert fragment in str(raised.value)


@pytest.mark.parametrize(
    ("variable", "suggested"),
    [
        ("TPU_WATCHDOG_DRAIN_GRACE", ["TPU_WATCHDOG_DRAIN_MAINTENANCE_GRACE",
                                      "TPU_WATCHDOG_DRAIN_PREEMPTION_GRACE"]),
        ("TPU_WATCHDOG_DRYRUN", ["TPU_WATCHDOG_DRY_RUN"]),
        ("TPU_WATCHDOG_HOOK_TIMEOUT", ["TPU_WATCHDOG_HOOKS_TIMEOUT"]),
        ("TPU_WATCHDOG_LISTEN_ADDR", ["TPU_WATCHDOG_LISTEN"]),
        ("TPU_WATCHDOG_PORT", []),
        ("TPU_WATCHDOG_VERBOSE", []),
        ("TPU_WATCHDOG_ON", []),
    ],
)  # fmt: skip
def test_an_unknown_variable_suggests_only_close_names(variable: str, suggested: list[str]) -> None:
    """DRAIN_GRACE once suggested TPU_WATCHDOG_HOOKS_ON_DRAIN_END: a guess that sends the reader astray."""
    with pytest.raises(ConfigError) as raised:
        load_config(parse(), {variable: "1"})
    named = re.findall(r"'(TPU_WATCHDOG_\w+)'", str(raised.value))
    assert named == suggested
    assert ("did you mean" in str(raised.value)) == bool(suggested)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--grace", "-1"], ["flag --grace", "drain.maintenance_grace", "negative", "allowed: seconds"]),
        (["--preempt-grace", "soon"], ["flag --preempt-grace", "not a number"]),
        (["--on-timeout", "wait"], ["flag --on-timeout", "allowed: kill | leave"]),
        (["--listen", "localhost"], ["flag --listen", "no port"]),
        (["--listen", "::1:9478"], ["flag --listen", "brackets"]),
        (["--log-level", "loud"], ["flag --log-level", "debug | info"]),
        (["--metadata-host", "meta data"], ["flag --metadata-host", "not a host name"]),
        (["--device", "accel0"], ["flag --device", "not an absolute path"]),
        (["--state-dir", "relative/dir"], ["flag --state-dir", "not an absolute path"]),
        (["--exclude", "user:root"], ["flag --exclude", "pid:N, name:NAME or uid:N"]),
        (["--exclude", "pid:abc"], ["flag --exclude", "not a whole number"]),
        (["--exclude", "pid:0"], ["flag --exclude", "exclude.pids", "less than 1"]),
    ],
)
def test_bad_flag_is_a_config_error(argv: list[str], expected: list[str]) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(parse(*argv), {})
    for fragment in expected:
        assert fragment in str(raised.value)


def test_a_namespace_without_config_flags_gives_the_defaults() -> None:
    assert load_config(argparse.Namespace(), {}) == default_config()


def test_the_example_file_parses_and_holds_the_defaults() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "config.toml"
    config = load_config(parse("--config", str(example)), {})
    assert dataclasses.replace(config, config_file=None, sources={}) == default_config()
    commented_out = {"metadata.host", "hooks.on_event_start", "hooks.on_drain_end", "hooks.on_event_clear"}
    from_file = {key for key, source in config.sources.items() if source.kind == "file"}
    assert from_file == {s.key for s in SETTINGS} - commented_out  # every other key is in the example


def test_load_config_or_exit_says_why_and_exits_78(capsys: pytest.CaptureFixture[str]) -> None:
    assert load_config_or_exit(parse("--grace", "-3"), {}) == EXIT_CONFIG
    assert capsys.readouterr().err.startswith("tpu-watchdog: configuration error: flag --grace: ")
    assert isinstance(load_config_or_exit(parse("--grace", "3"), {}), Config)


# -- bounds: a value past one is refused from every source, naming the key and the bound ---------------------

BOUNDED = [
    ("drain.maintenance_grace", "86400", "86400.5", "86400 s (24 h)"),
    ("drain.preemption_grace", "3600", "3601", "3600 s (1 h)"),
    ("upcoming_maintenance.drain_before_window", "2592000", "2592001", "2592000 s (30 d)"),
    ("hooks.timeout", "3600", "1e12", "3600 s (1 h)"),
]


@pytest.mark.parametrize(("key", "most", "beyond", "bound"), BOUNDED)
def test_a_duration_past_its_bound_is_refused_from_the_file_and_the_environment(
    tmp_path: Path, key: str, most: str, beyond: str, bound: str
) -> None:
    section, _, leaf = key.rpartition(".")
    variable = "TPU_WATCHDOG_" + key.replace(".", "_").upper()
    assert load_config(parse(), {variable: most}).value(key) == float(most)
    for argv, environ, origin in [
        (["--config", write(tmp_path, f"[{section}]\n{leaf} = {beyond}\n")], {}, str(tmp_path)),
        ([], {variable: beyond}, f"environment {variable}"),
    ]:
        with pytest.raises(ConfigError) as raised:
            load_config(parse(*argv), environ)
        message = str(raised.value)
        assert message.startswith(origin)
        assert f"{key}: {float(beyond):g} is more than the maximum, {bound}; allowed: " in message


def test_grace_1e12_from_the_command_line_exits_78_naming_the_key_and_the_bound(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """It was accepted, and the event's first log line then failed: year 33715 is out of range."""
    assert load_config_or_exit(parse("--grace", "1e12"), {}) == EXIT_CONFIG
    assert capsys.readouterr().err == (
        "tpu-watchdog: configuration error: flag --grace: drain.maintenance_grace: 1e+12 is more than the "
        "maximum, 86400 s (24 h); allowed: seconds, a number >= 0 and <= 86400 s (24 h) (the wait before "
        "SIGKILL on maintenance)\n"
    )


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (["--exclude", "pid:4194305"], {}, "exclude.pids: 4194305 is more than the maximum, 4194304"),
        ([], {"TPU_WATCHDOG_EXCLUDE_UIDS": "4294967295"}, "exclude.uids: 4294967295 is more than the max"),
        ([], {"TPU_WATCHDOG_NOTIFY_WEBHOOKS": ",".join(["http://h"] * 17)}, "17 URLs are more than the max"),
        (["--device", "/" + "d" * 4096], {}, "devices.patterns: '/ddd"),
    ],
)  # fmt: skip
def test_ids_urls_and_paths_have_bounds_too(argv: list[str], environ: dict[str, str], expected: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load_config(parse(*argv), environ)


# -- webhook URLs where other users can read them: a warning, for `run` to log once --------------------------

SECRET = "https://hooks.example.com/services/T0/B0/s3cr3t"  # noqa: S105 - a made-up webhook URL


def test_a_webhook_flag_warns_that_every_user_can_read_it_and_names_the_safer_way() -> None:
    (warning,) = load_config(parse("--webhook", SECRET), {}).warnings
    assert "visible to every user of this host in /proc/PID/cmdline" in warning
    assert "TPU_WATCHDOG_NOTIFY_WEBHOOKS" in warning
    assert "s3cr3t" not in warning
    assert load_config(parse(), {"TPU_WATCHDOG_NOTIFY_WEBHOOKS": SECRET}).warnings == ()


def test_a_file_with_webhooks_that_others_can_read_warns(tmp_path: Path) -> None:
    path = write(tmp_path, f'[notify]\nwebhooks = ["{SECRET}"]\n')
    Path(path).chmod(0o644)
    (warning,) = load_config(parse("--config", path), {}).warnings
    assert warning == (
        f"notify.webhooks: {path} holds webhook URLs and other users can read it (mode 0644); "
        f"chmod 600 {path}"
    )
    Path(path).chmod(0o600)
    assert load_config(parse("--config", path), {}).warnings == ()
