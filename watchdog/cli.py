"""Entry point of `tpu-watchdog`: finds the sub-command and imports only its module.

Every exit status it or a command returns is defined in `watchdog.exitcodes`.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from collections.abc import Sequence
from typing import Protocol

from watchdog import __version__
from watchdog.exitcodes import EXIT_INTERRUPTED, EXIT_USAGE

# name -> (module under watchdog.commands, one-line help). Order is the order of `--help`.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run", "run the daemon: watch the metadata server and drain the TPU holders on maintenance"),
    "status": ("status", "show what the running daemon sees"),
    "history": (
        "history",
        "list the drains this host has seen, newest first: who was signalled, how each ended",
    ),
    "holders": ("holders", "list the processes holding the TPU device files"),
    "drill": ("drill", "rehearse a maintenance event on this host: SIGTERM, countdown, verdict per process"),
    "readiness": ("readiness", "judge each TPU holder's SIGTERM handling from /proc, sending no signal"),
    "config": ("config", "print the effective configuration and where each value came from"),
    "watch": ("watch", "print every change of the watched metadata keys"),
    "fake-metadata": ("fake_metadata", "serve a faithful fake GCE metadata server on loopback"),
    "demo": ("demo", "the whole product on the embedded fake metadata server, narrated"),
}


class CommandModule(Protocol):
    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def _top_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tpu-watchdog",
        description="Drain Cloud TPU VM workloads ahead of host maintenance and preemption.",
    )
    parser.add_argument("--version", action="version", version=f"tpu-watchdog {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def _load(name: str) -> CommandModule:
    module_name, _ = COMMANDS[name]
    module: CommandModule = importlib.import_module(f"watchdog.commands.{module_name}")
    return module


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in COMMANDS:
        # No known command: let argparse print help, the version, or a usage error (exit 2).
        parser = _top_parser()
        parser.parse_args(args)
        parser.print_usage(sys.stderr)
        return EXIT_USAGE
    name = args[0]
    if name == "run":
        # A stop (or a reload) that arrives while the daemon is still importing is held, not fatal: `run`
        # unblocks them once its handlers are in place, and a stop during start-up is then a clean exit 0.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
    module = _load(name)
    parser = argparse.ArgumentParser(prog=f"tpu-watchdog {name}", description=COMMANDS[name][1])
    module.add_arguments(parser)
    parsed = parser.parse_args(args[1:])
    try:
        return module.run(parsed)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
