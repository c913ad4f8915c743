"""Every setting once: its TOML key, `Config` attribute, default, parsers, allowed values and flag.

The file, the environment (`TPU_WATCHDOG_` + the key with dots as underscores, upper case), the flags and
`tpu-watchdog config` are all driven by this one table, so they cannot drift apart. Pure.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from watchdog.config import values as v
from watchdog.core.accelerators import NVIDIA_PATTERNS, PROFILE_CHOICES
from watchdog.core.vocabulary import (
    DEFAULT_MAINTENANCE_GRACE,
    DEFAULT_ON_TIMEOUT,
    DEFAULT_PREEMPTION_GRACE,
    LOOPBACK_NETWORKS,
    ON_TIMEOUT,
)

ENV_PREFIX = "TPU_WATCHDOG_"
# The bounds, each justified in docs/configuration.md ("Bounds"): a value past one is a typo or a unit
# mistake, and nothing within them can make a drain fail later (every deadline is a representable time,
# every timeout one threading accepts).
MAX_MAINTENANCE_GRACE = 86400.0  # 24 h: the longest stopping notice GCE gives is 1 h
MAX_PREEMPTION_GRACE = 3600.0  # 1 h: a preempted VM stops about 30 s after its notice
MAX_DRAIN_BEFORE_WINDOW = 30 * 86400.0  # 30 d: scheduled maintenance is announced about 7 days ahead
MAX_HOOK_TIMEOUT = 3600.0  # 1 h: a hook still running then is stuck
MAX_PID = 4194304  # PID_MAX_LIMIT: the kernel's cap on kernel.pid_max
MAX_UID = 4294967294  # uid_t; (uid_t)-1 is "no uid"
MAX_WEBHOOKS = 16  # each URL has a sender thread and a queue of its own
MAX_NOTICE_LEAD = 3600.0  # 1 h: a GPU VM's notice; a longer lead is the notice itself
MAINTENANCE_SIGTERM = ("at-notice", "before-window")
MIGRATE_ACTIONS = ("ignore", "drain")
UNKNOWN_EVENT_ACTIONS = ("drain", "ignore")
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")  # json: one object per line (Cloud Logging's fields); ignored under systemd


@dataclass(frozen=True)
class Setting:
    key: str  # dotted TOML key: "drain.maintenance_grace"; top-level keys have no dot
    attr: str  # the `Config` attribute
    default: object
    parse: Callable[[object], object]  # a TOML value -> the typed value (raises BadValueError)
    parse_text: Callable[[str], object]  # an environment or flag text -> the typed value
    allowed: str  # what is allowed, in words, for error messages and help
    flag: str | None = None  # the `run` flag, if there is one
    secret: bool = False  # shown only redacted (`tpu-watchdog config`): a webhook URL lets anyone post

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.key.replace(".", "_").upper()

    @property
    def section(self) -> str:
        return self.key.rpartition(".")[0]


def _seconds(
    key: str,
    attr: str,
    default: float,
    flag: str | None,
    what: str,
    maximum: float,
    positive: bool = False,
) -> Setting:
    return Setting(
        key,
        attr,
        default,
        functools.partial(v.seconds, maximum=maximum, positive=positive),
        functools.partial(v.seconds_text, maximum=maximum, positive=positive),
        f"seconds, a number {'>' if positive else '>='} 0 and <= {v.duration(maximum)} ({what})",
        flag,
    )


def _choice(key: str, attr: str, default: str, allowed: tuple[str, ...], flag: str | None = None) -> Setting:
    parse = functools.partial(v.choice, allowed=allowed)
    return Setting(key, attr, default, parse, parse, " | ".join(allowed), flag)


def _hook(attr: str, when: str) -> Setting:
    return Setting(
        f"hooks.{attr.removeprefix('hook_')}",
        attr,
        None,
        v.command,
        v.command_text,
        f'a command run {when}, as a list of strings (no shell), e.g. ["/usr/local/bin/notify", "--page"]',
    )


_ABSOLUTE_GLOBS = functools.partial(v.strings, absolute_path=True, non_empty=True)
_ABSOLUTE_PATHS = functools.partial(v.strings, absolute_path=True)
_NAMES = functools.partial(v.strings, absolute_path=False)
_PIDS = functools.partial(v.integers, minimum=1, maximum=MAX_PID)
_UIDS = functools.partial(v.integers, minimum=0, maximum=MAX_UID)
_STATE_DIR = functools.partial(v.string, absolute_path=True)

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "state_dir",
        "state_dir",
        "/var/lib/tpu-watchdog",
        _STATE_DIR,
        _STATE_DIR,
        "an absolute directory path",
        "--state-dir",
    ),
    Setting(
        "listen",
        "listen",
        v.Address("127.0.0.1", 9478),
        v.listen_address,
        v.listen_address,
        "HOST:PORT for metrics and health, e.g. 127.0.0.1:9478 or [::1]:9478",
        "--listen",
    ),
    _choice("log_level", "log_level", "info", LOG_LEVELS, "--log-level"),
    _choice("log_format", "log_format", "text", LOG_FORMATS, "--log-format"),
    Setting(
        "dry_run",
        "dry_run",
        False,
        v.boolean,
        v.boolean_text,
        "true | false (log what would be signalled, signal nothing)",
        "--dry-run",
    ),
    Setting(
        "metadata.host",
        "metadata_host",
        None,
        v.metadata_host,
        v.metadata_host,
        "HOST or HOST:PORT (unset: GCE_METADATA_HOST, else metadata.google.internal)",
        "--metadata-host",
    ),
    Setting(
        "devices.patterns",
        "devices",
        ("/dev/accel*", "/dev/vfio/*"),
        _ABSOLUTE_GLOBS,
        lambda text: _ABSOLUTE_GLOBS(v.list_text(text)),
        'a non-empty list of absolute path globs, e.g. ["/dev/accel*"]',
        "--device",
    ),
    _choice("devices.profile", "profile", "auto", PROFILE_CHOICES),
    Setting(
        "devices.nvidia_patterns",
        "nvidia_devices",
        NVIDIA_PATTERNS,
        _ABSOLUTE_GLOBS,
        lambda text: _ABSOLUTE_GLOBS(v.list_text(text)),
        'the GPU profile\'s device globs, a non-empty list of absolute paths, e.g. ["/dev/nvidia[0-9]*"]',
    ),
    Setting(
        "devices.gpu_agents",
        "gpu_agents",
        (),
        _NAMES,
        lambda text: _NAMES(v.list_text(text)),
        "a list of executable names never signalled on a GPU host, added to the built-in agents",
    ),
    Setting(
        "devices.extra_paths",
        "extra_paths",
        (),
        _ABSOLUTE_PATHS,
        lambda text: _ABSOLUTE_PATHS(v.list_text(text)),
        'a list of absolute paths whose holders are drained too, e.g. ["/tmp/libtpu_lockfile"]',
    ),
    Setting(
        "devices.allow_numbers",
        "allow_numbers",
        (),
        v.device_numbers,
        lambda text: v.device_numbers(v.list_text(text)),
        'a list of device numbers "MAJOR:MINOR" watched whatever sysfs says of them (odd hardware, tests), '
        'e.g. ["240:0"]',
        "--allow-number",
    ),
    Setting(
        "exclude.pids",
        "exclude_pids",
        (),
        _PIDS,
        functools.partial(v.integers_text, minimum=1, maximum=MAX_PID),
        f"a list of process ids from 1 to {MAX_PID}",
        "--exclude",
    ),
    Setting(
        "exclude.names",
        "exclude_names",
        (),
        _NAMES,
        lambda text: _NAMES(v.list_text(text)),
        "a list of process names (as in /proc/PID/comm)",
        "--exclude",
    ),
    Setting(
        "exclude.uids",
        "exclude_uids",
        (),
        _UIDS,
        functools.partial(v.integers_text, minimum=0, maximum=MAX_UID),
        f"a list of user ids from 0 to {MAX_UID}",
        "--exclude",
    ),
    _seconds(
        "drain.maintenance_grace",
        "maintenance_grace",
        DEFAULT_MAINTENANCE_GRACE,
        "--grace",
        "the wait before SIGKILL on maintenance",
        MAX_MAINTENANCE_GRACE,
    ),
    _seconds(
        "drain.preemption_grace",
        "preemption_grace",
        DEFAULT_PREEMPTION_GRACE,
        "--preempt-grace",
        "the wait before SIGKILL on preemption",
        MAX_PREEMPTION_GRACE,
    ),
    _choice("drain.on_timeout", "on_timeout", DEFAULT_ON_TIMEOUT, ON_TIMEOUT, "--on-timeout"),
    _choice("events.maintenance_sigterm", "maintenance_sigterm", "at-notice", MAINTENANCE_SIGTERM),
    _seconds(
        "events.maintenance_lead",
        "maintenance_lead",
        600.0,
        None,
        "with before-window: how long before the window starts SIGTERM goes",
        MAX_NOTICE_LEAD,
    ),
    _choice("events.migrate", "migrate_action", "ignore", MIGRATE_ACTIONS),
    _choice("events.unknown", "unknown_event_action", "drain", UNKNOWN_EVENT_ACTIONS),
    Setting(
        "upcoming_maintenance.drain_before_window",
        "drain_before_window",
        None,
        functools.partial(v.optional_seconds, maximum=MAX_DRAIN_BEFORE_WINDOW),
        functools.partial(v.optional_seconds_text, maximum=MAX_DRAIN_BEFORE_WINDOW),
        f"seconds before the window starts, a number >= 0 and <= {v.duration(MAX_DRAIN_BEFORE_WINDOW)}; "
        "0 = off",
    ),
    Setting(
        "upcoming_maintenance.drain_when_ongoing",
        "drain_when_ongoing",
        False,
        v.boolean,
        v.boolean_text,
        "true | false (drain when the maintenance status is ONGOING)",
    ),
    _hook("hook_on_event_start", "when an event starts"),
    _hook("hook_on_drain_end", "when a drain ends"),
    _hook("hook_on_event_clear", "when an event clears"),
    _seconds(
        "hooks.timeout",
        "hook_timeout",
        30.0,
        None,
        "how long a hook may run before it is killed",
        MAX_HOOK_TIMEOUT,
        positive=True,
    ),
    Setting(
        "http.status_allow",
        "status_allow",
        LOOPBACK_NETWORKS,
        v.networks,
        lambda text: v.networks(v.list_text(text)),
        'a list of IP networks that may read /status (pids, process names, devices), e.g. ["127.0.0.0/8", '
        '"::1/128", "10.0.0.0/8"]; /metrics and the probes are served to every client',
    ),
    Setting(
        "notify.webhooks",
        "webhooks",
        (),
        functools.partial(v.webhook_urls, maximum=MAX_WEBHOOKS),
        functools.partial(v.webhook_urls_text, maximum=MAX_WEBHOOKS),
        f"a list of at most {MAX_WEBHOOKS} http(s) URLs, each sent a JSON POST per event (a secret: shown "
        'redacted), e.g. ["https://hooks.slack.com/services/..."]',
        "--webhook",
        secret=True,
    ),
)

BY_KEY: dict[str, Setting] = {s.key: s for s in SETTINGS}
BY_ENV: dict[str, Setting] = {s.env: s for s in SETTINGS}
SECTIONS: frozenset[str] = frozenset(s.section for s in SETTINGS if s.section)
