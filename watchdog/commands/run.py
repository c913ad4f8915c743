"""`tpu-watchdog run`: the daemon. Builds the real edges from the configuration and runs the loop.

Exit statuses: 0 after a clean stop (SIGTERM/SIGINT), 78 (EX_CONFIG) for a bad configuration, so systemd's
RestartPreventExitStatus does not loop on it, 73 (EX_CANTCREAT) when the state directory is unusable, 75
(EX_TEMPFAIL) when another daemon holds the state directory past the lock wait (systemd's Restart= tries
again). A listen address that cannot be bound is no exit: the daemon protects the host without its HTTP
listener and binds again every BIND_RETRY s (surface/httpapi.py `RetryingListener`).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

from watchdog.config.settings import (
    Config,
    add_config_arguments,
    environment_help,
    load_config,
    load_config_or_exit,
)
from watchdog.core.stop import Stop
from watchdog.daemon.sighup import ReloadRequests, relay_signals
from watchdog.exitcodes import EXIT_CANTCREAT, EXIT_LOCKED, EXIT_OK
from watchdog.store.address import remove_listen_address

if TYPE_CHECKING:  # the daemon's modules are imported once the configuration is known good
    from watchdog.surface.logs import LogWriter

LOG_FLUSH_WAIT = 2.0  # s the last lines get to be written at exit
LOCK_WAIT = 30.0  # s a second instance waits for the first to stop (systemd and k8s stop it within 15 s)

log = logging.getLogger("tpu-watchdog")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = environment_help()
    parser.add_argument(
        "--metadata-timeout-sec", type=int, default=60, help=argparse.SUPPRESS
    )  # hanging-GET timeout_sec; the real server's habit is 60 (tests and the demo shorten it)
    parser.add_argument("--test-wedge-file", help=argparse.SUPPRESS)  # test-only fault switch (daemon.py)
    # s to wait for another daemon to release the state directory (tests shorten it)
    parser.add_argument("--lock-wait", type=float, default=LOCK_WAIT, help=argparse.SUPPRESS)
    # s between attempts to bind a listen address that was taken (tests shorten it)
    parser.add_argument("--listen-retry", type=float, default=None, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    status = _daemon(args)
    # The process ends here, without the interpreter's finalization: its daemon threads (a watch in a DNS
    # lookup, the log writer in a journal send, the HTTP listener) still run, and finalization tears the
    # modules down under them: under systemd it crashed (SIGSEGV) now and then after "stopped", turning a
    # clean stop into a failed unit. Everything that matters is saved and flushed by now.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)


def _daemon(args: argparse.Namespace) -> int:
    # First of all: a stop asked for while the daemon is still starting is a clean stop (exit 0) that the
    # loop honours at once, not a death by SIGTERM's default action halfway through start-up.
    stop = Stop()
    faulthandler.enable()  # a crash of the interpreter leaves every thread's stack on stderr (the journal)
    # `systemctl reload` (SIGHUP) re-reads the configuration; one during start-up is held until the loop runs.
    reloads = ReloadRequests()
    relay_signals(stop, reloads)  # SIGTERM/SIGINT set `stop`; the loop does the rest
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGHUP})  # cli.main
    environ = dict(os.environ)  # a reload reads the file again, with the flags and environment of the start
    config = load_config_or_exit(args, environ)
    if isinstance(config, int):
        return config

    from watchdog.surface.logs import setup_logging

    writer = setup_logging(config.log_level, log_format=config.log_format, background=True)
    try:
        return _serve(args, config, environ, stop, reloads, writer)
    finally:
        if writer is not None:
            writer.flush_within(LOG_FLUSH_WAIT)  # a stuck log stream must not keep the daemon from exiting


def _serve(
    args: argparse.Namespace,
    config: Config,
    environ: dict[str, str],
    stop: Stop,
    reloads: ReloadRequests,
    writer: LogWriter | None,
) -> int:
    for warning in config.warnings:  # once, at start: a reload's configuration is never asked for them
        log.warning("%s", warning)
    # Heavy imports after the configuration is known good: a typo costs no start-up time.
    from watchdog.daemon.compose import Wiring, build_daemon
    from watchdog.store.lock import StateDirBusyError, StateDirLock
    from watchdog.store.statefile import StateDirError
    from watchdog.surface.httpapi import BIND_RETRY, RetryingListener

    lock = StateDirLock(config.state_dir)  # held until this process ends: one daemon per host
    try:
        try:
            lock.acquire(0.0, stop)
        except StateDirBusyError:
            log.warning("another tpu-watchdog holds %s: waiting up to %.0f s for it to stop", lock.dir,
                        args.lock_wait)  # fmt: skip
            lock.acquire(args.lock_wait, stop)
        wiring = Wiring(
            timeout_sec=args.metadata_timeout_sec, wedge_file=args.test_wedge_file, reloads=reloads,
            reload_config=lambda: load_config(args, environ), log_writer=writer,
        )  # fmt: skip
        built = build_daemon(config, stop, wiring)
    except StateDirBusyError as error:
        if stop.is_set():
            log.info("tpu-watchdog stopped while waiting for the state directory")
            return EXIT_OK
        log.error("refusing to start: %s", error.strerror)
        return EXIT_LOCKED
    except StateDirError as error:
        log.error("%s", error.strerror or error)
        return EXIT_CANTCREAT
    daemon, transport, host = built.daemon, built.transport, built.metadata_host
    if stop.is_set():  # asked to stop while starting: nothing was started yet, the state file is as it was
        transport.close()
        log.info("tpu-watchdog stopped during start-up")
        return EXIT_OK
    log.info("metadata server %s", host)
    http = RetryingListener(
        str(config.listen), daemon.view, daemon.http_attempted, retry=args.listen_retry or BIND_RETRY,
        status_allow=config.status_allow,
    )  # fmt: skip
    http.start()  # binds now, or keeps trying on a thread of its own: protection never waits for it
    try:
        return daemon.run()
    finally:
        http.close()
        with contextlib.suppress(OSError):  # nothing listens now: `status` must not try that address
            remove_listen_address(config.state_dir)
        transport.close()
