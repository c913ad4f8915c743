"""`systemctl reload tpu-watchdog` (SIGHUP): read the configuration again; apply what can change live.

Live (`LIVE`): the drain policy (graces, events.*, upcoming_maintenance.*), the hooks, log_level and
notify.webhooks. The rest is what the daemon was built from (its state dir and lock, its listener, the
metadata server, which devices and processes a scan sees, dry run, on_timeout, the log format): a change
there is reported as needing a restart and the running value is kept.

An event in progress keeps the policy it started under, so a drain in progress keeps its deadline and its
rules: the new policy takes over once no event is on (a restart applies it at once; the drain resumes with
its deadline, which can then only move earlier). A file that does not load (bad TOML, a bad value, an
untrusted hook, a webhook that is no http(s) URL) changes nothing: the old configuration stays and the
reason is logged and sent to systemd.

Webhooks apply at once, mid-drain too: a sender for the new URLs is built as at start-up (compose.py's
`webhook_sender`, handed in as `senders`) and gets the next notices; the old one delivers what it had queued
to the URLs it was queued for, on its own threads, within its bounded time (daemon/notices.py `use`), so no
reload or signal waits for a receiver. A URL is a secret: the log line shows the URLs redacted (as
`tpu-watchdog config` does), STATUS= only their count.
Under systemd: RELOADING=1 first, then READY=1 with the outcome in STATUS= (sd_notify(3)).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any, Protocol

from watchdog.config.policy import policy_from_config
from watchdog.config.schema import BY_KEY, SETTINGS
from watchdog.config.settings import Config, ConfigError, displayed
from watchdog.core.lifecycle import Lifecycle
from watchdog.core.vocabulary import Output
from watchdog.daemon.notice_timing import NoticeTiming
from watchdog.daemon.notices import Notices
from watchdog.daemon.reporting import Reporter
from watchdog.daemon.systemd import SystemdNotify
from watchdog.daemon.view import StatusView
from watchdog.surface.hooks import HookRunner
from watchdog.surface.webhooks import WebhookSender

log = logging.getLogger("tpu-watchdog")

_POLICY = ("drain.maintenance_grace", "drain.preemption_grace", "events.migrate", "events.unknown",
           "upcoming_maintenance.drain_before_window", "upcoming_maintenance.drain_when_ongoing")  # fmt: skip
_AT_ONCE = (
    "hooks.on_event_start",
    "hooks.on_drain_end",
    "hooks.on_event_clear",
    "hooks.timeout",
    "log_level",
    "notify.webhooks",
)
LIVE = frozenset(_POLICY + _AT_ONCE)  # the settings a reload changes; every other one needs a restart


class Reloadable(Protocol):
    """What a reload changes in the daemon (daemon/loop.py's Daemon)."""

    config: Config
    notice_timing: NoticeTiming  # holds the policy in force
    hooks: HookRunner
    reporter: Reporter
    lifecycle: Lifecycle
    systemd: SystemdNotify
    view: StatusView
    notices: Notices


class Reloader:
    """Carries out reloads for one daemon; `load` reads the configuration as at start-up (the same
    flags and environment, the file read again); `senders` builds a webhook sender for a list of URLs."""

    def __init__(
        self, load: Callable[[], Config], senders: Callable[[tuple[str, ...]], WebhookSender | None]
    ) -> None:
        self.load, self._senders = load, senders
        self._pending: Config | None = None  # a policy waiting for the event in progress to end

    def reload(self, daemon: Reloadable) -> None:
        """Apply what changed; every line and sd_notify message of it is guarded (a reload may come
        mid-drain, and one that fails to be told is still carried out)."""
        outputs = daemon.reporter.outputs
        with outputs.guarded(Output.NOTIFY):
            daemon.systemd.notifier.reloading("reloading the configuration")
        old = daemon.config
        try:
            new = self.load()
        except ConfigError as error:
            self._refused(daemon, str(error))
            return
        except Exception as error:  # logged whole (log.exception): a reload must never take the daemon down
            with outputs.guarded(Output.LOG):
                log.exception("reload: reading the configuration failed")
            self._refused(daemon, f"{type(error).__name__}: {error}")
            return
        changed = [s.key for s in SETTINGS if new.value(s.key) != old.value(s.key)]
        restart = [key for key in changed if key not in LIVE]
        live = [key for key in changed if key in LIVE]
        values: dict[str, Any] = {BY_KEY[key].attr: new.value(key) for key in live}
        sources = {**old.sources, **{key: new.source(key) for key in live}}
        daemon.config = dataclasses.replace(old, **values, sources=sources)
        fresh = HookRunner.from_config(daemon.config)
        daemon.hooks.commands, daemon.hooks.timeout = fresh.commands, fresh.timeout
        logging.getLogger().setLevel(daemon.config.log_level.upper())
        if "notify.webhooks" in live:
            daemon.notices.use(self._senders(daemon.config.webhooks))
        if any(key in _POLICY for key in live) or self._pending is not None:
            self._pending = daemon.config  # the newest policy, waiting or not
        waits = self._pending is not None and bool(daemon.lifecycle.events)
        if self._pending is not None and not waits:
            self._apply_policy(daemon, self._pending)
            self._pending = None
        said = _describe(old, new, live, restart, waits)
        with outputs.guarded(Output.LOG):
            log.log(
                logging.WARNING if restart else logging.INFO,  # a change that did not happen: a warning
                "configuration reloaded from %s: %s", new.config_file or "no file (defaults)", said,
            )  # fmt: skip
        short = f"{len(live)} setting(s) changed"
        if "notify.webhooks" in live:  # counted, never shown: a URL is a secret
            short += f", notify.webhooks {len(old.webhooks)} -> {len(new.webhooks)} URL(s)"
        if restart:
            short += f", restart needed for {', '.join(restart)}"
        with outputs.guarded(Output.NOTIFY):
            daemon.systemd.notifier.ready(f"reloaded ({short}); {daemon.view.summary()}")

    def settle(self, daemon: Reloadable) -> None:
        """After a change of the lifecycle: a policy that waited for the event in progress applies now."""
        if self._pending is not None and not daemon.lifecycle.events:
            self._apply_policy(daemon, self._pending)
            self._pending = None
            with daemon.reporter.outputs.guarded(Output.LOG):
                log.info("the reloaded drain settings apply now: the event in progress is over")

    def _apply_policy(self, daemon: Reloadable, config: Config) -> None:
        daemon.notice_timing.policy = policy_from_config(config)
        daemon.reporter.unknown_event_action = config.unknown_event_action

    def _refused(self, daemon: Reloadable, why: str) -> None:
        with daemon.reporter.outputs.guarded(Output.LOG):
            log.error("reload refused, the configuration in use is unchanged: %s", why)
        with daemon.reporter.outputs.guarded(Output.NOTIFY):
            daemon.systemd.notifier.ready(f"reload refused (configuration unchanged): {why}")


def _describe(old: Config, new: Config, live: list[str], restart: list[str], waits: bool) -> str:
    """One line: what changed now, what waits for the event in progress, what needs a restart."""

    def change(key: str) -> str:
        return f"{key} {_shown(displayed(old, BY_KEY[key]))} -> {_shown(displayed(new, BY_KEY[key]))}"

    parts = []
    now = [change(k) for k in live if not (waits and k in _POLICY)]
    later = [change(k) for k in live if waits and k in _POLICY]
    if now:
        parts.append("applied " + ", ".join(now))
    if later:
        parts.append("after the event in progress: " + ", ".join(later))
    if restart:  # named, not shown: what the daemon was built from is told by `tpu-watchdog config`
        parts.append(f"needs `systemctl restart tpu-watchdog` (the old value stays): {', '.join(restart)}")
    return "; ".join(parts) or "nothing changed"


def _shown(value: object) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(map(str, value)) + "]"
    return "unset" if value is None else str(value)
