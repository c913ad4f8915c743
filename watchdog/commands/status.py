"""`tpu-watchdog status [--json]`: what the running daemon sees, from its /status endpoint; when the daemon
does not answer, what its state file says (marked as such, since it may be stale).

The daemon is found through its state dir (`STATE_DIR/listen`, where it says it listens), then the
configuration's `listen`: an edited `listen` names the next daemon's address, not this one's. `--listen`
given on the command line is the only address tried.

Exit 0 when the daemon answered, 3 when only the state file could be read, 1 when neither, or when what
was read is in a shape this version cannot put in words (a line says so: never a traceback).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import sys
import urllib.error
import urllib.request
from typing import Any

from watchdog.config.settings import add_config_arguments, load_config_or_exit
from watchdog.daemon.status_text import render
from watchdog.exitcodes import EXIT_FROM_STATE_FILE, EXIT_NO_ANSWER, EXIT_OK
from watchdog.host.procfs import start_time
from watchdog.store.address import read_listen_address
from watchdog.store.history import HISTORY_FILE, load_entries
from watchdog.store.statefile import STATE_FILE

RECENT = 5  # drains read from the history file when the daemon does not answer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, only=("--config", "--listen", "--state-dir"))  # where the daemon is
    parser.add_argument("--json", action="store_true", help="print the raw JSON")


def fetch(listen: str, timeout: float = 3.0) -> dict[str, Any]:
    host, _, port = listen.rpartition(":")
    if host in ("0.0.0.0", "", "[::]"):  # noqa: S104 - a wildcard bind is reached on loopback
        host = "127.0.0.1"
    with urllib.request.urlopen(f"http://{host}:{port}/status", timeout=timeout) as answer:
        return _object(json.loads(answer.read()))


def _object(data: object) -> dict[str, Any]:
    """The answer or file as a JSON object; ValueError when it is JSON of another kind."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def _why(error: BaseException) -> str:
    """A failed request or read in words, never a library's repr."""
    if isinstance(error, urllib.error.HTTPError) and error.code == 403:
        return (
            "it serves /status only to the networks in http.status_allow, which lack this host's own address"
        )
    if isinstance(error, urllib.error.HTTPError):
        return f"it answered HTTP {error.code} ({error.reason})"
    reason = error.reason if isinstance(error, urllib.error.URLError) else error
    if isinstance(reason, ConnectionRefusedError):
        return "nothing listens there (connection refused)"
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return "no answer within 3 s"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    if isinstance(reason, ValueError):
        return "not JSON (is something else listening there?)"
    return str(reason)


def from_state_file(state_dir: str) -> dict[str, Any]:
    with open(os.path.join(state_dir, STATE_FILE), encoding="utf-8") as handle:
        return _object(json.load(handle))


def _signalled(saved: dict[str, Any], drain: dict[str, Any]) -> list[dict[str, Any]]:
    """The drain's processes as the state file has them (its signals), running or gone as of now."""
    started = drain.get("started_at")
    by_pid: dict[tuple[int, object], dict[str, Any]] = {}
    signals = saved.get("signals")
    for record in signals if isinstance(signals, list) else []:
        if not isinstance(record, dict) or not isinstance(record.get("pid"), int):
            continue
        key = (record["pid"], record.get("start_time"))
        proc = by_pid.setdefault(
            key, {"pid": key[0], "name": record.get("name"), "signals": [], "sent_after": {}, "user": None}
        )
        proc["signals"].append(record.get("signal"))
        at = record.get("sent_at") or record.get("intent_at")
        if isinstance(at, (int, float)) and isinstance(started, (int, float)):
            proc["sent_after"][record.get("signal")] = at - started
        running = start_time(key[0]) == key[1]
        proc["end"], proc["detail"] = ("still_running", None) if running else ("exited", None)
    return list(by_pid.values())


def _recent(state_dir: str) -> list[dict[str, object]]:
    """The newest drains of the history file (none if it cannot be read: status is no place to fail)."""
    try:
        return list(reversed(load_entries(os.path.join(state_dir, HISTORY_FILE))))[:RECENT]
    except OSError:
        return []


def addresses(listen: str, from_flag: bool, state_dir: str) -> list[str]:
    """Where to ask, in order: the address the running daemon wrote in its state dir, then `listen`."""
    said = None if from_flag else read_listen_address(state_dir)
    return [said, listen] if said is not None and said != listen else [listen]


def ask(where: list[str]) -> tuple[dict[str, Any] | None, str]:
    """/status from the first address that answers, or None and why each did not, in words."""
    why = []
    for listen in where:
        try:
            return fetch(listen), ""
        except (OSError, urllib.error.URLError, ValueError) as error:
            why.append(f"on {listen}: {_why(error)}")
    return None, "; ".join(why)


def run(args: argparse.Namespace) -> int:
    config = load_config_or_exit(args, os.environ)
    if isinstance(config, int):
        return config
    where = addresses(str(config.listen), config.source("listen").kind == "flag", config.state_dir)
    answer, why = ask(where)
    if answer is not None:
        status, code = answer, EXIT_OK
    else:
        sys.stderr.write(
            f"no answer from the daemon {why}. Is it running? See "
            "`systemctl status tpu-watchdog`. Showing its state file instead.\n"
        )
        try:
            saved = from_state_file(config.state_dir)
        except (OSError, ValueError) as file_error:
            if not os.path.isdir(config.state_dir):  # a mistyped --state-dir is not a daemon yet to run
                sys.stderr.write(
                    f"no state directory {config.state_dir} either: the daemon keeps its state file there; "
                    "point --state-dir (or state_dir in the configuration) at the daemon's state directory\n"
                )
                return EXIT_NO_ANSWER
            what = "none there" if isinstance(file_error, FileNotFoundError) else _why(file_error)
            if isinstance(file_error, ValueError):
                what = f"not the JSON object it writes: {file_error}"
            sys.stderr.write(
                f"no usable state file in {config.state_dir} either ({what}): the daemon has not run "
                "with this state dir, or --state-dir points elsewhere\n"
            )
            return EXIT_NO_ANSWER
        status, code = _from_saved(saved, config.state_dir), EXIT_FROM_STATE_FILE
    if args.json:
        sys.stdout.write(json.dumps(status, indent=2, sort_keys=True) + "\n")
        return code
    try:
        text = render(status)
    except Exception as error:  # noqa: BLE001 - an answer of an unknown shape is a line, never a traceback
        what = (
            f"the state file in {config.state_dir}"
            if status.get("from_state_file")
            else "the daemon's answer"
        )
        sys.stderr.write(
            f"cannot put {what} in words ({type(error).__name__}: {error}): it is not in a shape this "
            "version knows; `tpu-watchdog status --json` prints it as it is\n"
        )
        return EXIT_NO_ANSWER
    sys.stdout.write(text)
    return code


def _from_saved(saved: dict[str, Any], state_dir: str) -> dict[str, Any]:
    """What the state file says, in the shape of the daemon's /status (`render` reads either)."""
    status: dict[str, Any] = {
        "state": "unknown (daemon not answering)",
        "events": saved.get("events", []),
        "last_outcome": saved.get("last_outcome"),
        "from_state_file": True,
        "recent_drains": _recent(state_dir),
    }
    drain = saved.get("drain")
    if isinstance(drain, dict):
        deadline = drain.get("deadline_at")
        now = datetime.datetime.now(datetime.timezone.utc).timestamp()
        status["drain"] = {
            "deadline": deadline,
            "time_left": max(0.0, deadline - now) if isinstance(deadline, (int, float)) else None,
            "on_timeout": drain.get("on_timeout"),
            "processes": _signalled(saved, drain),
        }
    return status
