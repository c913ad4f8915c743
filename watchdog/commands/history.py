"""`tpu-watchdog history [--json] [--limit N] [--state-dir DIR]`: the drains this host has seen, newest first.

It reads the history file (`STATE_DIR/history.jsonl`) itself, so it works whether the daemon runs or not,
and it never writes. `--json` prints a list of drains, newest first, in the file's own shape.

Exit status: 0 (an empty history too), 1 the history cannot be read (the state directory missing
included: a mistyped --state-dir is not an empty history), 78 a bad configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from watchdog.config.settings import add_config_arguments, load_config_or_exit
from watchdog.exitcodes import EXIT_NO_HISTORY, EXIT_OK
from watchdog.store.drain_text import block
from watchdog.store.history import HISTORY_FILE, load_entries
from watchdog.store.statefile import STATE_FILE

DEFAULT_LIMIT = 10


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of drains") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} drains: give 1 or more")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, only=("--config", "--state-dir"))  # where the state dir is, nothing else
    parser.add_argument("--json", action="store_true", help="print the drains as a JSON list, newest first")
    parser.add_argument(
        "--limit", type=_limit, default=DEFAULT_LIMIT, metavar="N",
        help=f"show the newest N drains (default {DEFAULT_LIMIT})",
    )  # fmt: skip


def _drain_in_progress(state_dir: str) -> str | None:
    """The id of the drain the state file has in progress, if it can be read (it is not needed)."""
    try:
        with open(os.path.join(state_dir, STATE_FILE), encoding="utf-8") as handle:
            drain = json.load(handle).get("drain")
    except (OSError, ValueError, AttributeError):
        return None
    return str(drain.get("id")) if isinstance(drain, dict) and drain.get("id") else None


def run(args: argparse.Namespace) -> int:
    config = load_config_or_exit(args, os.environ)
    if isinstance(config, int):
        return config
    path = os.path.join(config.state_dir, HISTORY_FILE)
    if not os.path.isdir(config.state_dir):
        sys.stderr.write(
            f"no state directory {config.state_dir}: the daemon keeps its history there; point --state-dir "
            "(or state_dir in the configuration) at the daemon's state directory\n"
        )
        return EXIT_NO_HISTORY
    said: list[str] = []
    try:
        entries = load_entries(path, say=said.append)
    except OSError as error:
        sys.stderr.write(
            f"cannot read the drain history {path}: {error.strerror or error}; run as root, or point "
            "--state-dir at the daemon's state directory\n"
        )
        return EXIT_NO_HISTORY
    for line in said:
        sys.stderr.write(f"note: {line}\n")
    newest = list(reversed(entries))[: args.limit]
    if args.json:
        sys.stdout.write(json.dumps(newest, indent=2) + "\n")
        return EXIT_OK
    if not newest:
        sys.stdout.write(f"no drain yet on this host ({path} has none)\n")
        return EXIT_OK
    in_progress = _drain_in_progress(config.state_dir)
    blocks = ["\n".join(block(entry, state_drain_id=in_progress)) for entry in newest]
    more = len(entries) - len(newest)
    tail = f"\n({more} older drain(s): --limit {len(entries)} shows them)\n" if more > 0 else ""
    sys.stdout.write("\n\n".join(blocks) + "\n" + tail)
    return EXIT_OK
