"""`tpu-watchdog status [--json]`: what the running daemon sees, from its /status endpoint; when the daemon
does not answer, what its state file says (marked as such, since it may be stale).

Exit 0 when the daemon answered, 3 when only the state file could be read, 1 when neither.
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
from watchdog.exitcodes import EXIT_FROM_STATE_FILE, EXIT_NO_ANSWER, EXIT_OK
from watchdog.host.procfs import start_time
from watchdog.store.drain_text import process_line, totals
from watchdog.store.history import HISTORY_FILE, load_entries
from watchdog.store.statefile import STATE_FILE

RECENT = 5  # drains read from the history file when the daemon does not answer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, only=("--config", "--listen", "--state-dir"))  # where the daemon is
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
        data: dict[str, Any] = json.load(handle)
        return data


def _left(seconds: object) -> str:
    if not isinstance(seconds, (int, float)):
        return "?"
    whole = max(0, int(seconds))
    return f"{whole // 60} min {whole % 60} s" if whole >= 60 else f"{whole} s"


def _metadata_line(key: str, watch: dict[str, Any]) -> str:
    """One watched key in words: its value and last answer, or that it cannot be heard and why."""
    error, heard = watch.get("last_error"), watch.get("last_success")
    mode = watch.get("mode")
    if mode == "unsupported":
        return f"{key}: not on this machine (404): asked again now and then"
    if error and (not heard or watch.get("value") is None):
        since = f"since {_when(heard)}" if heard else "since start"
        return f"{key}: UNREACHABLE: no good answer {since}, last error {error} (retrying)"
    retrying = f"; now failing: {error}, retrying" if error else ""
    return f"{key} = {watch.get('value')} (last answer {_when(heard)}{retrying})"


def _drain_lines(status: dict[str, Any]) -> list[str]:
    """The drain in progress: its deadline, time left, and each process (signalled when, running or gone)."""
    drain = status.get("drain")
    if not drain:
        return []
    dry = bool(status.get("dry_run"))
    lines = [
        f"drain:       deadline {_when(drain.get('deadline'))}, {_left(drain.get('time_left'))} left, "
        f"then {drain.get('on_timeout', '?')}" + (" (dry run: nothing is sent)" if dry else "")
    ]
    processes = drain.get("processes") or []
    if processes:
        running = sum(p.get("end") == "still_running" for p in processes if isinstance(p, dict))
        lines.append(f"processes:   {len(processes)} in this drain, {running} still running")
        lines += [f"  {process_line(p, dry_run=dry, live=True)}" for p in processes if isinstance(p, dict)]
    else:
        lines.append("processes:   none signalled yet")
    return lines


def _signalled(saved: dict[str, Any], drain: dict[str, Any]) -> list[dict[str, Any]]:
    """The drain's processes as the state file has them (its signals), running or gone as of now."""
    started = drain.get("started_at")
    by_pid: dict[tuple[int, object], dict[str, Any]] = {}
    for record in saved.get("signals") or []:
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


def render(status: dict[str, Any]) -> str:
    """What the daemon sees, in aligned lines, most important first: never a data structure."""
    dry = "  (dry run: nothing is sent)" if status.get("dry_run") and not status.get("drain") else ""
    lines = [f"state:       {status.get('state', '?')}{dry}"]
    if status.get("from_state_file"):
        lines.append("             the daemon is not answering: this is its state file, which may be stale")
    for event in status.get("events", []):
        since = _when(event.get("first_seen"))
        lines.append(f"event:       {event.get('source')} = {event.get('value')} (since {since})")
    lines += _drain_lines(status)
    recent = [d for d in status.get("recent_drains") or [] if isinstance(d, dict)]
    last = next((d for d in recent if d.get("outcome") is not None), None)
    if last is not None and not status.get("drain"):
        tag = " (dry run)" if last.get("dry_run") else ""
        lines.append(
            f"last drain:  {last.get('outcome')}{tag}, started {last.get('started')}: {totals(last)}"
        )
        lines += [
            f"  {process_line(p, dry_run=bool(last.get('dry_run')))}" for p in last.get("processes", [])
        ]
        lines.append("             (every drain: tpu-watchdog history)")
    elif status.get("last_outcome") and not status.get("drain"):
        lines.append(f"last drain:  {status['last_outcome']}")
    holders = status.get("holders")
    if isinstance(holders, list) and not status.get("drain"):  # during a drain: its processes, above
        lines.append(
            f"holders:     {len(holders)} at the last scan"
            if holders
            else "holders:     none at the last scan"
        )
        for holder in holders:
            devices = " ".join(holder.get("devices", []))
            sigterm = f" (SIGTERM {holder['sigterm']})" if holder.get("sigterm") else ""
            lines.append(f"             pid {holder.get('pid')} {holder.get('name')}: {devices}{sigterm}")
    for key, watch in sorted((status.get("metadata") or {}).items()):
        lines.append(f"metadata:    {_metadata_line(key, watch)}")
    state_file = status.get("state_file") or {}
    if state_file.get("persisted") is False:
        lines.append(
            f"state file:  NOT PERSISTED: {state_file.get('error')} (a restart now would forget a drain)"
        )
    history = status.get("history_file") or {}
    if history.get("persisted") is False:
        lines.append(f"history:     NOT WRITTEN: {history.get('error')} (kept in memory until there is room)")
    host = status.get("host") or {}
    if host:
        lines.append("host:        " + " ".join(f"{k}={v}" for k, v in sorted(host.items())))
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    config = load_config_or_exit(args, os.environ)
    if isinstance(config, int):
        return config
    try:
        status = fetch(str(config.listen))
        code = EXIT_OK
    except (OSError, urllib.error.URLError, ValueError) as error:
        sys.stderr.write(
            f"no answer from the daemon on {config.listen}: {_why(error)}. Is it running? See "
            "`systemctl status tpu-watchdog`. Showing its state file instead.\n"
        )
        try:
            saved = from_state_file(config.state_dir)
        except (OSError, ValueError) as file_error:
            what = "none there" if isinstance(file_error, FileNotFoundError) else _why(file_error)
            sys.stderr.write(
                f"no usable state file in {config.state_dir} either ({what}): the daemon has not run "
                "with this state dir, or --state-dir points elsewhere\n"
            )
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
                "processes": _signalled(saved, drain),
            }
        status["recent_drains"] = _recent(config.state_dir)
        code = EXIT_FROM_STATE_FILE
    sys.stdout.write(json.dumps(status, indent=2, sort_keys=True) + "\n" if args.json else render(status))
    return code
