"""`tpu-watchdog fake-metadata`: the fake GCE metadata server as a process, with a scripted timeline.

Rehearsals and the demo point GCE_METADATA_HOST at it; the first stdout line says where it listens.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import TextIO

from watchdog.exitcodes import EXIT_CANNOT_LISTEN, EXIT_OK, EXIT_USAGE
from watchdog.fake.listen import DEFAULT_LISTEN, check_listen, parse_listen
from watchdog.fake.server import FakeMetadataServer
from watchdog.fake.store import MetadataStore
from watchdog.fake.timeline import Assignment, Step, TimelineError, parse_assignment, parse_steps
from watchdog.fake.vm_identity import GPU_FIELDS, TPU_FIELDS, parse_identity

PROG = "tpu-watchdog fake-metadata"

EPILOG = """\
examples:
  tpu-watchdog fake-metadata --listen 127.0.0.1:0
  tpu-watchdog fake-metadata --at 10s instance/maintenance-event=TERMINATE_ON_HOST_MAINTENANCE \\
      --at 1m30s instance/maintenance-event=-
  tpu-watchdog fake-metadata --identity node=my-slice,accelerator_type=v5litepod-16,hosts=4,worker=1,\
      slice_id=0,num_slices=2
  tpu-watchdog fake-metadata --identity a3-highgpu-8g,zone=us-east5-a
  tpu-watchdog fake-metadata --set 'instance/upcoming-maintenance={"type": "SCHEDULED", \\
      "maintenance_status": "PENDING", "window_start_time": "2030-01-01T00:00:00Z"}'

Then: GCE_METADATA_HOST=127.0.0.1:8053 tpu-watchdog watch
Control API (no flavor header needed): PUT/DELETE /_fake/v1/KEY, POST /_fake/reset, POST /_fake/faults,
POST /_fake/identity, GET /_fake/requests.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"where to listen (default: {DEFAULT_LISTEN}); port 0 picks a free port",
    )
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a non-loopback --listen address (anyone who can reach it can fake maintenance)",
    )
    parser.add_argument(
        "--identity",
        metavar="FIELD=VALUE,...",
        help="serve this VM identity (every identity key, consistent; --set overrides one): a TPU VM with "
        f"fields {', '.join(TPU_FIELDS)}; or a GPU VM, its machine type first (a3-highgpu-8g,zone=...), "
        f"fields {', '.join(GPU_FIELDS)}",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="serve VALUE at KEY from the start (JSON for instance/upcoming-maintenance; KEY=- for the "
        "default); repeatable",
    )
    parser.add_argument(
        "--at",
        action="append",
        nargs=2,
        default=[],
        metavar=("DELAY", "KEY=VALUE"),
        help="at DELAY after start (500ms, 10s, 2m, 1m30s) set KEY (KEY=- resets it); repeatable",
    )


def run(args: argparse.Namespace) -> int:
    try:
        address = parse_listen(args.listen)
        check_listen(address, args.allow_remote)
        identity = parse_identity(args.identity) if args.identity else None
        initial = [parse_assignment(text) for text in args.set]
        steps = parse_steps(args.at)
        _rehearse(initial + [step.assignment for step in steps])
    except (TimelineError, ValueError) as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return EXIT_USAGE
    fake = FakeMetadataServer(listen=args.listen, allow_remote=args.allow_remote)
    if identity is not None:
        fake.set_identity(identity)
    for assignment in initial:
        apply(fake, assignment)
    stop = threading.Event()
    restore = _stop_on_signals(stop)
    try:
        return serve(fake, steps, stop, sys.stdout, sys.stderr)
    finally:
        restore()


def serve(
    fake: FakeMetadataServer, steps: Sequence[Step], stop: threading.Event, out: TextIO, err: TextIO
) -> int:
    """Serve until `stop` is set, playing the timeline meanwhile."""
    try:
        fake.start()
    except OSError as exc:
        err.write(f"{PROG}: error: cannot listen on {fake.listen}: {exc.strerror or exc}\n")
        return EXIT_CANNOT_LISTEN
    try:
        out.write(f"fake metadata server listening on {fake.address}\n")
        out.flush()
        play(steps, lambda a: apply(fake, a), stop, err)
        stop.wait()
    finally:
        fake.stop()
    err.write("fake metadata server stopped\n")
    return EXIT_OK


def play(
    steps: Sequence[Step],
    apply_one: Callable[[Assignment], None],
    stop: threading.Event,
    err: TextIO,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Apply each step at its time after now, logging it; returns early when `stop` is set."""
    start = clock()
    for step in steps:
        if stop.wait(max(0.0, start + step.at - clock())):
            return
        apply_one(step.assignment)
        err.write(f"fake-metadata: {step.describe()}\n")
        err.flush()


def apply(fake: FakeMetadataServer, assignment: Assignment) -> None:
    if assignment.value is None:
        fake.reset(assignment.key)
    else:
        fake.set(assignment.key, assignment.value)


def _rehearse(assignments: Sequence[Assignment]) -> None:
    """Apply every assignment to a scratch store, so a bad one (a directory as a key, a value under a
    value) fails now with a usage error instead of minutes into the timeline."""
    scratch = MetadataStore()
    for assignment in assignments:
        try:
            if assignment.value is None:
                scratch.reset(assignment.key)
            else:
                scratch.set(assignment.key, assignment.value)
        except ValueError as exc:
            raise TimelineError(f"cannot apply {assignment.describe()}: {exc}") from None


def _stop_on_signals(stop: threading.Event) -> Callable[[], None]:
    """SIGTERM/SIGINT set `stop` (only the main thread can have handlers); returns the undo."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {signum: signal.signal(signum, handler) for signum in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for signum, old in previous.items():
            signal.signal(signum, old)

    return restore
