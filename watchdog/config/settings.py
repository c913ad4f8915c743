"""The daemon's configuration: defaults < TOML file < `TPU_WATCHDOG_*` environment < command-line flags.

Every value keeps where it came from (for `tpu-watchdog config`), and every bad value stops start-up with a
`ConfigError` naming the file, variable or flag, the key, and what is allowed (`load_config_or_exit`: 78).
Pure apart from reading the file and stat-ing who could have changed it and the files its hooks name (the
daemon runs as root: `_refuse_untrusted`, by the rule in `trust`). The settings themselves are listed once,
in `schema`.
"""

from __future__ import annotations

import argparse
import os
import shlex
import stat
import sys
import types
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from watchdog.config import values as v
from watchdog.config.schema import BY_ENV, BY_KEY, ENV_PREFIX, SECTIONS, SETTINGS, Setting
from watchdog.config.suggest import suggest
from watchdog.config.trust import hook_refusal, path_refusal
from watchdog.core.redaction import redacted_url
from watchdog.core.vocabulary import (
    DEFAULT_MAINTENANCE_GRACE,
    DEFAULT_PREEMPTION_GRACE,
    ON_TIMEOUT,
    OnTimeout,
)
from watchdog.exitcodes import EXIT_CONFIG

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - TPU VM images ship Python 3.10, where tomli is the same parser.
    import tomli as tomllib

DEFAULT_CONFIG_PATH = "/etc/tpu-watchdog/config.toml"
CONFIG_ENV = ENV_PREFIX + "CONFIG"
# Set by the daemon in its hooks' environment: not settings, so the loader ignores them.
HOOK_ENV = frozenset(
    ENV_PREFIX + name
    for name in ("HOOK", "EVENT", "EVENT_SOURCE", "EVENT_VALUE", "EVENT_ID", "OUTCOME", "DEADLINE",
                 "DEADLINE_EPOCH")
)  # fmt: skip
_HOOKS = tuple(s for s in SETTINGS if s.parse is v.command)  # the hook commands (not hooks.timeout)


class ConfigError(Exception):
    """A configuration that must not start the daemon: the message says where, which key, what is allowed."""


@dataclass(frozen=True)
class Source:
    """Where a value came from: `kind` is default | file | env | flag; `where` the path, variable or flag."""

    kind: Literal["default", "file", "env", "flag"]
    where: str = ""

    def __str__(self) -> str:
        return self.kind if self.kind == "default" else f"{self.kind} {self.where}"


@dataclass(frozen=True)
class Config:
    """The effective configuration: from `load_config`, or `dataclasses.replace(default_config(), ...)`."""

    state_dir: str
    listen: v.Address
    log_level: str  # debug | info | warning | error
    log_format: str  # text | json (stderr; under systemd the journal gets structured fields either way)
    dry_run: bool
    metadata_host: str | None  # None: GCE_METADATA_HOST, else metadata.google.internal
    devices: tuple[str, ...]  # path globs of the TPU device files
    profile: str  # auto | tpu | nvidia-gpu: which accelerator's devices and agents (docs/gpu-vms.md)
    nvidia_devices: tuple[str, ...]  # path globs of the GPU profile's device files (one per GPU)
    gpu_agents: tuple[str, ...]  # executable names never signalled on a GPU host, beside the built-in ones
    extra_paths: tuple[str, ...]
    allow_numbers: tuple[str, ...]  # "MAJ:MIN" watched whatever sysfs says (docs/devices.md)
    exclude_pids: tuple[int, ...]
    exclude_names: tuple[str, ...]
    exclude_uids: tuple[int, ...]
    maintenance_grace: float
    preemption_grace: float
    on_timeout: OnTimeout  # kill | leave: what a drain's deadline does
    migrate_action: str  # ignore | drain
    unknown_event_action: str  # drain | ignore
    maintenance_sigterm: str  # at-notice | before-window (of upcoming-maintenance's window, when it has one)
    maintenance_lead: float  # before-window: SIGTERM this long before the window starts
    drain_before_window: float | None  # None: off
    drain_when_ongoing: bool
    hook_on_event_start: tuple[str, ...] | None
    hook_on_drain_end: tuple[str, ...] | None
    hook_on_event_clear: tuple[str, ...] | None
    hook_timeout: float
    status_allow: tuple[str, ...]  # IP networks /status is served to (normalised CIDR); loopback by default
    webhooks: tuple[str, ...]  # secrets: shown only through `displayed` (redacted)
    config_file: str | None = None  # the file read, None when none was
    sources: Mapping[str, Source] = field(default_factory=dict, compare=False)  # TOML key -> source
    warnings: tuple[str, ...] = field(default=(), compare=False)  # for `run` to log once, at start

    def source(self, key: str) -> Source:
        return self.sources.get(key, Source("default"))

    def value(self, key: str) -> object:
        """The value of a setting by its TOML key, e.g. `value("drain.maintenance_grace")`."""
        return getattr(self, BY_KEY[key].attr)


def default_config() -> Config:
    values: dict[str, Any] = {s.attr: s.default for s in SETTINGS}
    return Config(**values)


class _Only:
    """An argument group that takes only the flags a command uses (all when `only` is None)."""

    def __init__(self, group: argparse._ArgumentGroup, only: Collection[str] | None) -> None:
        self._group, self._only = group, only

    def add_argument(self, *names: str, **options: Any) -> None:
        if self._only is None or names[0] in self._only:
            self._group.add_argument(*names, **options)


def add_config_arguments(parser: argparse.ArgumentParser, only: Collection[str] | None = None) -> None:
    """The flags of `tpu-watchdog run` and `config`; `only` names the few another command uses, so its
    --help lists no flag it would ignore and it refuses one. Values are checked by `load_config`, not
    argparse, so a bad one is a configuration error (exit 78) that names the flag."""
    heading = "configuration (flags override TPU_WATCHDOG_* variables and the file)"
    group = _Only(parser.add_argument_group(heading), only)
    group.add_argument(
        "--config", metavar="FILE", help=f"TOML configuration file (default {DEFAULT_CONFIG_PATH})"
    )
    group.add_argument("--metadata-host", metavar="HOST[:PORT]", help="metadata server (default: resolved)")
    group.add_argument(
        "--device",
        metavar="GLOB",
        action="append",
        help="a TPU device path glob; repeat for more (replaces the list)",
    )
    group.add_argument(
        "--allow-number",
        metavar="MAJ:MIN",
        action="append",
        help="watch this device number whatever sysfs says of it; repeatable (replaces the list)",
    )
    group.add_argument(
        "--exclude",
        metavar="pid:N|name:NAME|uid:N",
        action="append",
        help="never signal these processes; repeatable (each kind given replaces that kind's list)",
    )
    group.add_argument(
        "--grace",
        metavar="S",
        help=f"seconds from SIGTERM to SIGKILL on maintenance (default {DEFAULT_MAINTENANCE_GRACE:g})",
    )
    group.add_argument(
        "--preempt-grace",
        metavar="S",
        help=f"seconds from SIGTERM to SIGKILL on preemption ({DEFAULT_PREEMPTION_GRACE:g})",
    )
    group.add_argument(
        "--on-timeout", metavar="|".join(ON_TIMEOUT), help="at the deadline: SIGKILL, or leave them be"
    )
    group.add_argument(
        "--state-dir", metavar="DIR", help="where the state file lives (/var/lib/tpu-watchdog)"
    )
    group.add_argument("--listen", metavar="HOST:PORT", help="metrics and health address (127.0.0.1:9478)")
    group.add_argument(
        "--dry-run", action="store_true", default=None, help="log what would be signalled, signal nothing"
    )
    group.add_argument("--log-level", metavar="LEVEL", help="debug | info | warning | error")
    group.add_argument("--log-format", metavar="FORMAT", help="text | json (one JSON object per line)")
    group.add_argument(
        "--webhook",
        metavar="URL",
        action="append",
        help="POST a JSON notice per event to URL (Slack, Google Chat, ...); repeatable (replaces the list)",
    )


def environment_help() -> str:
    """The environment variables, one per line, for a parser's epilog."""
    lines = [f"  {CONFIG_ENV}  the configuration file"]
    lines += [f"  {s.env}  {s.key}" for s in SETTINGS]
    return "environment (overrides the file, overridden by flags):\n" + "\n".join(lines)


def _fail(origin: str, setting: Setting, problem: str) -> ConfigError:
    return ConfigError(f"{origin}: {setting.key}: {problem}; allowed: {setting.allowed}")


def _config_path(args: argparse.Namespace, environ: Mapping[str, str]) -> tuple[str, Source, bool]:
    flag = getattr(args, "config", None)
    if flag:
        return flag, Source("flag", "--config"), True
    if environ.get(CONFIG_ENV):
        return environ[CONFIG_ENV], Source("env", CONFIG_ENV), True
    return DEFAULT_CONFIG_PATH, Source("default"), False


def _read_file(path: str, explicit: bool, source: Source) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as handle:
            document: dict[str, Any] = tomllib.load(handle)
            return document
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"{path}: configuration file not found (named by {source})") from None
        return None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: not UTF-8 text ({error.reason})") from None
    except RecursionError:  # tomllib recurses once per level of nesting: ~500 levels exhaust the stack
        raise ConfigError(f"{path}: not valid TOML: arrays or tables nested too deeply") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the configuration file: {error.strerror}") from None


def _flatten(document: dict[str, Any], path: str) -> dict[str, object]:
    """The file's values by dotted key; unknown keys and misplaced tables are errors."""
    flat: dict[str, object] = {}
    top_level = [s.key for s in SETTINGS if not s.section]
    for name, value in document.items():
        if name in SECTIONS:
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: {name}: must be a table ([{name}]), not {v.show(value)}")
            for leaf, item in value.items():
                key = f"{name}.{leaf}"
                if key not in BY_KEY:
                    siblings = [k.rpartition(".")[2] for k in BY_KEY if k.startswith(name + ".")]
                    raise ConfigError(
                        f"{path}: unknown key {key!r}{suggest(key, list(BY_KEY))}; "
                        f"known in [{name}]: {', '.join(siblings)}"
                    )
                flat[key] = item
        elif name in BY_KEY:
            flat[name] = value
        else:
            known = list(BY_KEY) + sorted(SECTIONS)
            raise ConfigError(
                f"{path}: unknown key {name!r}{suggest(name, known)}; known top-level keys: "
                f"{', '.join(top_level)}; tables: {', '.join(sorted(SECTIONS))}"
            )
    return flat


def _as_typed(value: object) -> object:
    """The text a flag was given: argparse (3.11) hands `--flag=--` over as [], not "--"."""
    return "--" if value == [] else value


def _flag_values(args: argparse.Namespace) -> list[tuple[Setting, str, object]]:
    """(setting, flag, raw value) for every flag given; raw text is parsed later like the environment's."""
    simple = {
        "metadata_host": "metadata.host",
        "grace": "drain.maintenance_grace",
        "preempt_grace": "drain.preemption_grace",
        "on_timeout": "drain.on_timeout",
        "state_dir": "state_dir",
        "listen": "listen",
        "log_level": "log_level",
        "log_format": "log_format",
    }
    given: list[tuple[Setting, str, object]] = []
    for dest, key in simple.items():
        text = getattr(args, dest, None)
        if text is not None:
            given.append((BY_KEY[key], "--" + dest.replace("_", "-"), _as_typed(text)))
    if getattr(args, "dry_run", None):
        given.append((BY_KEY["dry_run"], "--dry-run", True))
    devices = getattr(args, "device", None)
    if devices:
        given.append((BY_KEY["devices.patterns"], "--device", [_as_typed(d) for d in devices]))
    numbers = getattr(args, "allow_number", None)
    if numbers:
        given.append((BY_KEY["devices.allow_numbers"], "--allow-number", [_as_typed(n) for n in numbers]))
    webhooks = getattr(args, "webhook", None)
    if webhooks:
        given.append((BY_KEY["notify.webhooks"], "--webhook", [_as_typed(w) for w in webhooks]))
    excludes: dict[str, list[object]] = {}
    for item in map(_as_typed, getattr(args, "exclude", None) or []):
        kind, colon, what = str(item).partition(":")
        if not colon or kind not in ("pid", "name", "uid") or not what:
            raise ConfigError(
                f"flag --exclude: {item!r} is not pid:N, name:NAME or uid:N (e.g. --exclude uid:0)"
            )
        if kind != "name":
            if not (what.isascii() and what.isdigit()):  # int() refuses some digits: "²"
                raise ConfigError(f"flag --exclude: {item!r}: {what!r} is not a whole number")
            excludes.setdefault(kind, []).append(int(what))
        else:
            excludes.setdefault(kind, []).append(what)
    for kind, values in excludes.items():
        given.append((BY_KEY[f"exclude.{kind}s"], "--exclude", values))
    return given


def _refuse_untrusted(path: str | None, values: Mapping[str, Any], sources: Mapping[str, Source]) -> None:
    """The daemon runs as root: refuse what anyone else could have chosen - the file read (`path`, None
    when none was) and each hook - by the rule in `trust`."""
    user = "root" if os.geteuid() == 0 else f"uid {os.geteuid()}"
    if path is not None:
        because = path_refusal(path)
        if because:
            raise ConfigError(f"{path}: refused: it directs a daemon running as {user}, and {because}")
    for setting in _HOOKS:
        argv = values[setting.attr]
        because = hook_refusal(argv) if argv else None
        if because:
            source = sources[setting.key]
            origin = source.where if source.kind == "file" else f"environment {source.where}"  # no hook flag
            raise ConfigError(f"{origin}: {setting.key}: refused: the hook runs as {user}, and {because}")


def _warnings(path: str | None, values: Mapping[str, Any], sources: Mapping[str, Source]) -> tuple[str, ...]:
    """What start-up logs once: webhook URLs (secrets) where other users can read them."""
    if not values["webhooks"]:
        return ()
    source = sources["notify.webhooks"]
    safer = (
        "give them in the configuration file (chmod 600) or in TPU_WATCHDOG_NOTIFY_WEBHOOKS (e.g. a systemd "
        "EnvironmentFile= only root can read)"
    )
    if source.kind == "flag":
        return (f"notify.webhooks: a --webhook URL is visible to every user of this host in "
                f"/proc/PID/cmdline (ps -ef); {safer}",)  # fmt: skip
    if source.kind == "file" and path is not None:
        mode = os.stat(path).st_mode
        if mode & (stat.S_IRGRP | stat.S_IROTH):
            return (f"notify.webhooks: {path} holds webhook URLs and other users can read it (mode "
                    f"{stat.S_IMODE(mode):04o}); chmod 600 {shlex.quote(path)}",)  # fmt: skip
    return ()


def load_config(args: argparse.Namespace, environ: Mapping[str, str]) -> Config:
    """The effective configuration from defaults, the file, `environ` and the flags in `args`."""
    values: dict[str, Any] = {s.attr: s.default for s in SETTINGS}
    sources: dict[str, Source] = {}

    path, path_source, explicit = _config_path(args, environ)
    document = _read_file(path, explicit, path_source)
    if document is not None:
        for key, raw in _flatten(document, path).items():
            setting = BY_KEY[key]
            try:
                values[setting.attr] = setting.parse(raw)
            except v.BadValueError as error:
                raise _fail(path, setting, str(error)) from None
            sources[key] = Source("file", path)

    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name == CONFIG_ENV or name in HOOK_ENV:
            continue
        if name not in BY_ENV:
            raise ConfigError(
                f"environment: unknown variable {name}{suggest(name, [*BY_ENV, CONFIG_ENV])}; "
                f"unset it, or see `tpu-watchdog config --help` for the known ones"
            )
        setting = BY_ENV[name]
        try:
            values[setting.attr] = setting.parse_text(environ[name])
        except v.BadValueError as error:
            raise _fail(f"environment {name}", setting, str(error)) from None
        sources[setting.key] = Source("env", name)

    for setting, flag, raw in _flag_values(args):
        try:
            values[setting.attr] = setting.parse_text(raw) if isinstance(raw, str) else setting.parse(raw)
        except v.BadValueError as error:
            raise _fail(f"flag {flag}", setting, str(error)) from None
        sources[setting.key] = Source("flag", flag)

    config_file = path if document is not None else None
    _refuse_untrusted(config_file, values, sources)
    return Config(
        **values,
        config_file=config_file,
        sources=types.MappingProxyType(sources),
        warnings=_warnings(config_file, values, sources),
    )


def load_config_or_exit(args: argparse.Namespace, environ: Mapping[str, str]) -> Config | int:
    """`load_config`, or EXIT_CONFIG with the reason on stderr: how every command that reads it starts."""
    try:
        return load_config(args, environ)
    except ConfigError as error:
        sys.stderr.write(f"tpu-watchdog: configuration error: {error}\n")
        return EXIT_CONFIG


def displayed(config: Config, setting: Setting) -> object:
    """A setting's value as people see it (`tpu-watchdog config`): a secret only redacted."""
    value = config.value(setting.key)
    if setting.secret and isinstance(value, tuple):
        return tuple(redacted_url(str(item)) for item in value)
    return value


def as_dict(config: Config) -> dict[str, dict[str, object]]:
    """Every setting by TOML key: its value (JSON-ready), source, environment variable and flag."""
    result: dict[str, dict[str, object]] = {}
    for setting in SETTINGS:
        value = displayed(config, setting)
        if isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, v.Address):
            value = str(value)
        source = config.source(setting.key)
        result[setting.key] = {
            "value": value,
            "source": source.kind,
            "where": source.where or None,
            "env": setting.env,
            "flag": setting.flag,
        }
    return result
