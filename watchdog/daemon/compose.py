"""The composition root: the one place a `Daemon` is built from a `Config` and its edges.

`tpu-watchdog run`, the demo and the tests all build through `build_daemon`, so the daemon they run is
wired the same way. What differs between them (where the metadata server is, how fast the watches give up,
which processes a scan may see) is a `Wiring`; everything else comes from the configuration. `drill` has no
daemon: `build_drill` wires its drain from the same configuration and the same scanner.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from watchdog.config.policy import policy_from_config
from watchdog.config.settings import Config
from watchdog.core.accelerators import Profile, ProfileChoice
from watchdog.core.clock import Clock, SystemClock
from watchdog.core.drain import DrainPlan
from watchdog.core.drain_record import DrainRecord
from watchdog.core.lifecycle import Lifecycle
from watchdog.core.process import Holder
from watchdog.core.stop import Stop
from watchdog.core.vocabulary import Output
from watchdog.daemon.announce import PROGRESS_INTERVAL, LogLines
from watchdog.daemon.departures import Departures
from watchdog.daemon.device_watch import DeviceWatch
from watchdog.daemon.draining import DrainListener, ExitWaiter, Scanner, Signaller, run_drain
from watchdog.daemon.gpucheck import CrossChecked
from watchdog.daemon.inbox import Inbox
from watchdog.daemon.index import HolderIndex
from watchdog.daemon.loop import Daemon, Message, PersistenceChanged
from watchdog.daemon.newcomers import CONFIRM_WAIT, Newcomers
from watchdog.daemon.notice_timing import NoticeTiming
from watchdog.daemon.notices import Notices
from watchdog.daemon.outputs import Outputs
from watchdog.daemon.profile import host_profile, say_profile
from watchdog.daemon.recorder import HistoryEntries
from watchdog.daemon.reload import Reloader
from watchdog.daemon.reporting import Reporter
from watchdog.daemon.runner import DrainRunner
from watchdog.daemon.sighup import ReloadRequests
from watchdog.daemon.systemd import SystemdNotify
from watchdog.daemon.telling import LifecycleGauges, SignalCounter, SiteHooks, Telling
from watchdog.daemon.view import StatusView
from watchdog.host.devices import SYS
from watchdog.host.exits import Wakeup
from watchdog.host.holders import HolderScanner, scanner_for
from watchdog.host.nvml import GpuProcesses, Nvml
from watchdog.metadata.backoff import WatchBackoff
from watchdog.metadata.errors import ErrorKind
from watchdog.metadata.identity import fetch_identity
from watchdog.metadata.transport import MetadataTransport, resolve_metadata_host
from watchdog.metadata.watch import MetadataWatcher, WatchTiming
from watchdog.store.statefile import StateStore
from watchdog.surface.hooks import HookRunner
from watchdog.surface.logs import LogWriter
from watchdog.surface.metrics import Metrics
from watchdog.surface.notify import Notifier
from watchdog.surface.webhooks import BACKOFF, WebhookSender

log = logging.getLogger("tpu-watchdog")


@dataclass(frozen=True)
class Wiring:
    """What may differ from a production daemon. None: the production choice."""

    metadata_host: str | None = None  # "127.0.0.1:PORT" of a fake; None: the config, GCE_METADATA_HOST, GCE
    timeout_sec: int = 60  # the hanging GET's timeout_sec (the real server's habit)
    timing: WatchTiming | None = None
    backoff: Callable[[], WatchBackoff] | None = None
    scanner: Scanner | None = None  # None: every process of this PID namespace (`scanner_for(config)`)
    narrow: Callable[[HolderScanner], Scanner] | None = None  # the production scanner, narrowed (tests)
    gpus: GpuProcesses | None = None  # NVML's view on a GPU host; None: the real NVML, if it can be had
    store: StateStore | None = None  # None: the state file in config.state_dir
    notifier: Notifier | None = None  # None: sd_notify to $NOTIFY_SOCKET, if set
    clock: Clock | None = None
    host_info: bool = True  # read the instance's identity from the metadata server
    wedge_file: str | None = None  # test-only fault switch (see Daemon._wedge_if_asked)
    confirm_wait: float = CONFIRM_WAIT
    reload_config: Callable[[], Config] | None = None  # what a reload reads; None: the config as given
    reloads: ReloadRequests | None = None  # SIGHUP's pipe (`run` installs the handler); None: no SIGHUP
    webhook_backoff: float = BACKOFF  # s before a webhook's second attempt (doubled after)
    progress_interval: float = PROGRESS_INTERVAL  # s between a drain's progress lines
    sys_root: str = SYS  # the sysfs tree that classifies device nodes (a fixture tree in tests)
    log_writer: LogWriter | None = None  # the daemon's log thread (`run`): its dropped lines are counted
    processes: Callable[[], tuple[Signaller, ExitWaiter]] | None = None  # a test's world; None: pidfds


@dataclass
class Built:
    """A daemon and the edges its builder must close (the transport) or may read (metrics, store)."""

    daemon: Daemon
    transport: MetadataTransport
    metrics: Metrics
    store: StateStore
    metadata_host: str

    def close(self) -> None:
        self.transport.close()


def build_daemon(config: Config, stop: Stop, wiring: Wiring | None = None) -> Built:
    """The daemon for `config`, stopped by `stop`. Raises StateDirError if the state dir is unusable."""
    wiring = wiring or Wiring()
    store = wiring.store or StateStore(config.state_dir, clock=wiring.clock)  # the daemon's one clock
    host = wiring.metadata_host or resolve_metadata_host(config.metadata_host, os.environ)
    transport = MetadataTransport(host)
    metrics = Metrics(error_kinds=[kind.value for kind in ErrorKind])
    outputs = Outputs(metrics)  # the daemon's one guard, from the first line said while building it
    if wiring.log_writer is not None:  # a line dropped behind a stuck log stream: an output error
        wiring.log_writer.on_drop = metrics.output_errors.labels(Output.LOG.value).inc

    senders = functools.partial(
        webhook_sender, metrics=metrics, outputs=outputs, backoff=wiring.webhook_backoff
    )
    production, choice = host_scanner(config, transport, wiring.sys_root)
    say_profile(choice, config, outputs)
    scanner = wiring.scanner or (wiring.narrow(production) if wiring.narrow else production)
    if choice.profile is Profile.NVIDIA_GPU:
        scanner = gpu_cross_checked(scanner, wiring.gpus, stop, outputs)

    # The inputs: each answers into the inbox, which wakes the loop.
    clock = wiring.clock or SystemClock()
    inbox: Inbox[Message] = Inbox()
    watcher = MetadataWatcher(
        transport, inbox.put, stop, timeout_sec=wiring.timeout_sec, timing=wiring.timing,
        backoff_factory=wiring.backoff or WatchBackoff,
        on_output_error=functools.partial(outputs.failed, Output.LOG),
    )  # fmt: skip
    # The core, as the state file left it, and its verdicts.
    policy, saved = policy_from_config(config), store.state
    lifecycle = Lifecycle.restored(
        saved.events, saved.drain, saved.last_outcome, config.maintenance_grace, saved.last_dry_run,
        saved.ended_drain, saved.ended_at,
    )  # fmt: skip
    newcomers = Newcomers(
        lifecycle, clock.wall(), wiring.confirm_wait, saved.unconfirmed(), outputs=outputs,
        ask=policy.ladder.ask.name,
    )  # fmt: skip
    runner: DrainRunner  # the index pauses while it runs (built next: it asks the index for its scans)
    busy = lambda: runner.running or bool(lifecycle.events)  # noqa: E731 - the drain asks for its scans then
    index = HolderIndex(scanner, inbox.put, busy, stop, outputs=outputs, clock=clock)
    runner = DrainRunner(
        config, scanner=scanner, store=store, clock=clock, stop=stop, ask_scan=index.scan_now,
        wakeup=inbox.wakeup, persistence_changed=lambda: inbox.put(PersistenceChanged()), outputs=outputs,
        processes=wiring.processes,
    )  # fmt: skip
    # The outputs: what the daemon shows and keeps, and the moments' subscribers.
    view: StatusView  # the history names its host by what /status knows (built next)
    recorder = HistoryEntries(store, config, metrics, clock, outputs=outputs, host=lambda: view.host)
    notices = Notices(senders(config.webhooks), recorder.host_labels, clock, config.dry_run)
    view = StatusView(
        config, clock, watcher, lifecycle, metrics.registry, account=recorder, webhooks=notices.webhooks
    )
    recorder.restored(saved, lifecycle)  # the drain on file that will not be resumed
    reporter = Reporter(metrics, view, store, policy.unknown_event_action, outputs)
    systemd = SystemdNotify(
        wiring.notifier or Notifier(), outputs, view.summary, started=clock.monotonic(),
        watched=len(watcher.watches),
    )  # fmt: skip
    hooks = HookRunner.from_config(config)
    telling = Telling(outputs, lifecycle, [
        recorder, LifecycleGauges(metrics), SignalCounter(metrics), view, systemd,
        LogLines(policy.ladder, config.dry_run), notices, SiteHooks(hooks, config.dry_run),
    ])  # fmt: skip
    daemon = Daemon(
        config=config, stop=stop, clock=clock, inbox=inbox, watcher=watcher, index=index,
        devices=DeviceWatch(production.devices, production.patterns or config.devices, view, outputs),
        lifecycle=lifecycle, notice_timing=NoticeTiming(lambda: view.values, lifecycle, policy, outputs),
        newcomers=newcomers, runner=runner, store=store, telling=telling, reporter=reporter,
        view=view, recorder=recorder, systemd=systemd,
        departures=Departures(metrics, outputs, reporter.holders_now), notices=notices, hooks=hooks,
        reloader=Reloader(wiring.reload_config or (lambda: config), senders), outputs=outputs,
        identity=(lambda paths: fetch_identity(transport, paths)) if wiring.host_info else None,
        progress_interval=wiring.progress_interval, wedge_file=wiring.wedge_file,
    )  # fmt: skip
    if wiring.reloads is not None:
        wiring.reloads.forward(daemon.inbox.put)
    return Built(daemon, transport, metrics, store, host)


def gpu_cross_checked(
    scanner: Scanner, gpus: GpuProcesses | None, stop: threading.Event, outputs: Outputs
) -> Scanner:
    """`scanner` cross-checked with NVML (`gpus`, else the real one); without NVML, said once, unchanged."""
    if gpus is None:
        gpus, why = Nvml.open()
        with outputs.guarded(Output.LOG):
            if gpus is None:
                log.info("GPU cross-check with NVML off: %s; the holder scan decides alone", why)
            else:
                log.info("GPU cross-check with NVML on: %s", why)
        if gpus is None:
            return scanner
    return CrossChecked(scanner, gpus, stop, outputs=outputs)


def webhook_sender(
    urls: Sequence[str], metrics: Metrics, outputs: Outputs, backoff: float = BACKOFF
) -> WebhookSender | None:
    """The one place a webhook sender is built, at start-up and by a reload that changes notify.webhooks:
    counted on the daemon's metrics, its own lines and counters under the daemon's output guard. None when
    there is no URL."""
    if not urls:
        return None
    return WebhookSender(
        urls, on_sent=metrics.webhooks_sent.inc,
        on_failed=lambda reason: metrics.webhook_failures.labels(reason.value).inc(), backoff=backoff,
        guarded=outputs.guarded,
    )  # fmt: skip


@dataclass(frozen=True)
class Drill:
    """A drill's drain, wired as the daemon's: the scanner the configuration describes, and a plan of the
    maintenance grace (the longer one: a drill rehearses it), on_timeout and dry_run."""

    scanner: Scanner
    plan: DrainPlan

    def drain(
        self, holders: Sequence[Holder], listener: DrainListener, cancel: threading.Event, wake: Wakeup
    ) -> DrainRecord:
        """`wake`: rung with `cancel` (Ctrl-C), so the drain's wait ends at once."""
        return run_drain(
            holders, self.plan, scanner=self.scanner, listener=listener, cancel=cancel, wake=wake
        )


def build_drill(config: Config, wiring: Wiring | None = None) -> Drill:
    """The drill's drain for `config` (only `wiring.scanner` applies: a drill asks no metadata server)."""
    wiring = wiring or Wiring()
    ladder = policy_from_config(config).ladder
    plan = DrainPlan(grace=config.maintenance_grace, ladder=ladder, dry_run=config.dry_run)
    return Drill(scanner=wiring.scanner or host_scanner(config, sys_root=wiring.sys_root)[0], plan=plan)


def host_scanner(
    config: Config, transport: MetadataTransport | None = None, sys_root: str = SYS
) -> tuple[HolderScanner, ProfileChoice]:
    """The scanner of this host's accelerator profile (daemon, drill, readiness), and the choice; without
    `transport` the profile comes from the configuration and the device nodes alone."""
    choice = host_profile(config, transport)
    return scanner_for(config, choice.profile, sys_root), choice
