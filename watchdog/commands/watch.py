"""`tpu-watchdog watch`: print every change (and failure) of the watched metadata keys until SIGINT/SIGTERM.

One line per event, so an SRE can see exactly what the daemon would see:
    2026-11-29T15:00:00Z instance/maintenance-event TERMINATE_ON_HOST_MAINTENANCE
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TextIO

from watchdog.config.settings import add_config_arguments, load_config_or_exit
from watchdog.core.stop import Stop
from watchdog.exitcodes import EXIT_OK, EXIT_USAGE
from watchdog.metadata.transport import MetadataTransport, resolve_metadata_host
from watchdog.metadata.watch import MetadataWatcher, ValueChanged, WatchEvent, WatchFailed


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # The daemon's own metadata.host (file, TPU_WATCHDOG_METADATA_HOST, --metadata-host), so `watch` sees
    # the server the daemon watches; unset there: $GCE_METADATA_HOST, else metadata.google.internal.
    add_config_arguments(parser, only=("--config", "--metadata-host"))
    parser.add_argument(
        "--timeout-sec",
        type=int,
        default=60,
        metavar="T",
        help="server-side hang of each wait_for_change request, whole seconds (default: 60)",
    )


def format_event(event: WatchEvent) -> str:
    """One line: UTC time, key, then the value, the failure, or that the key is unsupported."""
    stamp = dt.datetime.fromtimestamp(event.at, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(event, ValueChanged):
        what = event.value.describe()
    elif isinstance(event, WatchFailed):
        what = f"error {event.error.kind.value}: {event.error.detail} (retrying)"
    else:
        what = "unsupported: 404 on this machine type; no longer watched"
    return f"{stamp} {event.key} {what}"


class LinePrinter:
    """The emit callback: writes one line per event, whole lines only, from any watch thread."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._lock = threading.Lock()

    def __call__(self, event: WatchEvent) -> None:
        line = format_event(event)
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set `stop` (the handler only sets the event); old handlers come back after."""

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def run(args: argparse.Namespace) -> int:
    config = load_config_or_exit(args, os.environ)
    if isinstance(config, int):
        return config
    try:
        host = resolve_metadata_host(config.metadata_host, os.environ)
    except ValueError as exc:
        sys.stderr.write(f"tpu-watchdog watch: {exc}\n")
        return EXIT_USAGE
    if args.timeout_sec < 1:
        sys.stderr.write(f"tpu-watchdog watch: --timeout-sec must be >= 1, got {args.timeout_sec}\n")
        return EXIT_USAGE
    asked, stop = threading.Event(), Stop()
    sys.stderr.write(f"watching http://{host}/computeMetadata/v1/ (wait_for_change, {args.timeout_sec} s)\n")
    with stop_on_signals(asked), MetadataTransport(host) as transport:
        watcher = MetadataWatcher(transport, LinePrinter(sys.stdout), stop, timeout_sec=args.timeout_sec)
        watcher.start()
        asked.wait()  # a signal handler runs during the wait and sets it
        stop.set()  # here, not in the handler: it closes the transport, ending the hanging GETs
        watcher.join(timeout=5.0)
    return EXIT_OK
