"""`tpu-watchdog status [--json]`: what the running daemon sees, from its /status endpoint; when the daemon
does not answer, what its state file says (marked as such, since it may be stale).

Exit 0 when the daemon answered, 3 when only the state file could be read, 1 when neither.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any

from watchdog.config.settings import add_config_arguments, load_config_or_exit
from watchdog.exitcodes import EXIT_FROM_STATE_FILE, EXIT_NO_ANSWER, EXIT_OK
from watchdog.store.statefile import STATE_FILE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the raw JSON")


def _when(wall: float | None) -> str:
    if wall is None:
        return "-"
    return datetime.datetime.fromtimestamp(wall, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def fetch(listen: str, timeout: float = 3.0) -> dict[str, Any]:
    host, _, port = listen.rpartition(":")
    if host in ("0.0.0.0", "", "[::]"):  # noqa: S104 - a wildcard bind is reached on loopback
        host = "127.0.0.1"
    with urllib.request.urlopen(f"http://{host}:{port}/status", timeout=timeout) as answer:
        data: dict[str, Any] = json.loads(answer.read())
        return data


def from_state_file(state_dir: str) -> dict[str, Any]:
    with open(os.path.join(state_dir, STATE_FILE), encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)
        return data


def render(status: dict[str, Any]) -> str:
    lines = [f"state:     {status.get('state', '?')}{'  (dry run)' if status.get('dry_run') else ''}"]
    for event in status.get("events", []):
        lines.append(f"event:     {event['source']} = {event['value']} (since {_when(event['first_seen'])})")
    drain = status.get("drain")
    if drain:
        lines.append(
            f"drain:     deadline {_when(drain['deadline'])} ({drain['time_left']:.0f} s left), "
            f"then {drain['on_timeout']}"
        )
        record = drain.get("record") or {}
        for proc in record.get("processes", []):
            lines.append(f"           {proc.get('describe', proc)}")
    if status.get("last_outcome"):
        lines.append(f"last drain: {status['last_outcome']}")
    holders = status.get("holders", [])
    lines.append(f"holders:   {len(holders)}")
    for holder in holders:
        sigterm = f" (SIGTERM {holder['sigterm']})" if holder.get("sigterm") else ""
        devices = " ".join(holder["devices"])
        lines.append(f"           pid {holder['pid']} {holder['name']}: {devices}{sigterm}")
    for key, watch in sorted(status.get("metadata", {}).items()):
        error = f", last error {watch['last_error']}" if watch.get("last_error") else ""
        lines.append(
            f"metadata:  {key} = {watch.get('value')} ({watch['mode']}, last answer "
            f"{_when(watch.get('last_success'))}{error})"
        )
    host = status.get("host") or {}
    if host:
        lines.append("host:      " + " ".join(f"{k}={v}" for k, v in sorted(host.items())))
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    config = load_config_or_exit(args, os.environ)
    if isinstance(config, int):
        return config
    try:
        status = fetch(str(config.listen))
        code = EXIT_OK
    except (OSError, urllib.error.URLError, ValueError) as error:
        sys.stderr.write(f"the daemon does not answer on {config.listen} ({error}); reading its state file\n")
        try:
            saved = from_state_file(config.state_dir)
        except (OSError, ValueError) as file_error:
            sys.stderr.write(f"no usable state file in {config.state_dir} either: {file_error}\n")
            return EXIT_NO_ANSWER
        status = {
            "state": "unknown (daemon not answering)",
            "events": saved.get("events", []),
            "last_outcome": saved.get("last_outcome"),
            "from_state_file": True,
        }
        if saved.get("drain"):
            drain = saved["drain"]
            now = datetime.datetime.now(datetime.timezone.utc).timestamp()
            status["drain"] = {
                "deadline": drain["deadline_at"],
                "time_left": max(0.0, drain["deadline_at"] - now),
                "on_timeout": drain["on_timeout"],
            }
        code = EXIT_FROM_STATE_FILE
    sys.stdout.write(json.dumps(status, indent=2, sort_keys=True) + "\n" if args.json else render(status))
    return code
