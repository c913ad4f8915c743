"""`tpu-watchdog run`: the daemon. Builds the real edges from the configuration and runs the loop.

Exit statuses: 0 after a clean stop (SIGTERM/SIGINT), 78 (EX_CONFIG) for a bad configuration, so systemd's
RestartPreventExitStatus does not loop on it, 73 (EX_CANTCREAT) when the state directory is unusable, and
1 when the HTTP listener cannot bind.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from collections.abc import Callable

from watchdog.config.settings import add_config_arguments, environment_help, load_config_or_exit
from watchdog.exitcodes import EXIT_CANNOT_LISTEN, EXIT_CANTCREAT, EXIT_OK

log = logging.getLogger("tpu-watchdog")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = environment_help()
    parser.add_argument(
        "--metadata-timeout-sec", type=int, default=60, help=argparse.SUPPRESS
    )  # hanging-GET timeout_sec; the real server's habit is 60 (tests and the demo shorten it)
    parser.add_argument("--test-wedge-file", help=argparse.SUPPRESS)  # test-only fault switch (daemon.py)


def run(args: argparse.Namespace) -> int:
    # First of all: a stop asked for while the daemon is still starting is a clean stop (exit 0) that the
    # loop honours at once, not a death by SIGTERM's default action halfway through start-up.
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())  # handlers only set the event; the loop does the rest
    config = load_config_or_exit(args, os.environ)
    if isinstance(config, int):
        return config

    from watchdog.surface.logs import setup_logging

    setup_logging(config.log_level)
    # Heavy imports after the configuration is known good: a typo costs no start-up time.
    from watchdog.daemon.loop import Daemon
    from watchdog.host.holders import scanner_for
    from watchdog.metadata.errors import ErrorKind
    from watchdog.metadata.transport import MetadataTransport, read_host_info, resolve_metadata_host
    from watchdog.metadata.watch import MetadataWatcher, WatchEvent
    from watchdog.store.statefile import StateDirError, StateStore
    from watchdog.surface.hooks import HookRunner
    from watchdog.surface.httpapi import HttpSurface
    from watchdog.surface.metrics import Metrics
    from watchdog.surface.notify import Notifier

    try:
        store = StateStore(config.state_dir)
    except StateDirError as error:
        log.error("%s", error)
        return EXIT_CANTCREAT
    host = resolve_metadata_host(config.metadata_host, os.environ)
    transport = MetadataTransport(host)
    metrics = Metrics(error_kinds=[kind.value for kind in ErrorKind])
    scanner = scanner_for(config)

    def watcher_factory(emit: Callable[[WatchEvent], None]) -> MetadataWatcher:
        return MetadataWatcher(transport, emit, stop, timeout_sec=args.metadata_timeout_sec)

    daemon = Daemon(
        config,
        stop=stop,
        watcher_factory=watcher_factory,
        scanner=scanner,
        store=store,
        hooks=HookRunner.from_config(config),
        notifier=Notifier(),
        metrics=metrics,
        host_info=lambda: read_host_info(transport),
        wedge_file=args.test_wedge_file,
    )
    try:
        http = HttpSurface(str(config.listen), daemon.view)
    except OSError as error:
        log.error(
            "cannot listen on %s: %s (set --listen or listen = in the config file)", config.listen, error
        )
        return EXIT_CANNOT_LISTEN
    if stop.is_set():  # asked to stop while starting: nothing was started yet, the state file is as it was
        http.stop()
        transport.close()
        log.info("tpu-watchdog stopped during start-up")
        return EXIT_OK
    http.start()
    log.info(
        "metadata server %s; HTTP on http://%s (/metrics /livez /healthz /readyz /status)", host, http.address
    )
    try:
        return daemon.run()
    finally:
        http.stop()
        transport.close()
