"""The daemon's /status JSON in words, for `tpu-watchdog status` and the demo: aligned lines, the most
important first, never a data structure (it is read at 3 a.m.)."""

from __future__ import annotations

from typing import Any

from watchdog.core.clock import utc_time
from watchdog.core.workload import words_of
from watchdog.store.drain_text import one_line, process_line


def _when(wall: object) -> str:
    """A time of the answer in words: `-` when none, `?` when it is not a time, never a traceback."""
    if wall is None:
        return "-"
    if not isinstance(wall, (int, float)) or isinstance(wall, bool):
        return "?"
    return utc_time(wall, "seconds")


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


def _device_lines(devices: list[Any]) -> list[str]:
    """What the patterns matched: each path, its number and class, the verdict and why; NONE when no node
    is watched (a wrong pattern looks idle otherwise)."""
    matched = [d for d in devices if isinstance(d, dict)]
    nodes = [d for d in matched if d.get("watched") and d.get("type") != "file"]
    lines = [
        f"devices:     {len(nodes)} TPU device node(s) watched"
        if nodes
        else "devices:     NONE: no TPU device node matches devices.patterns: this host protects nothing"
    ]
    for d in matched:
        number = f" {d['number']}" if d.get("number") else ""
        cls = f" class {d['class']}" if d.get("class") else ""
        verdict = "" if d.get("watched") else "NOT WATCHED: "
        lines.append(f"             {d.get('path')}{number}{cls}: {verdict}{d.get('why')}")
    return lines


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
        lines.append(f"last drain:  {one_line(last)}")
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
            words = words_of(holder.get("workload"))
            who = f"{holder.get('name')} [{words}]" if words else holder.get("name")
            lines.append(f"             pid {holder.get('pid')} {who}: {devices}{sigterm}")
    matched = status.get("devices")
    if isinstance(matched, list):  # a state file (the daemon not answering) has none
        lines += _device_lines(matched)
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
    http = status.get("http") or {}
    if http.get("failed_binds"):
        lines.append(
            f"http:        listening on {http.get('address')} after {http['failed_binds']} failed bind(s) "
            "(journal: cannot listen on ...)"
        )
    host = status.get("host") or {}
    if host:
        lines.append("host:        " + " ".join(f"{k}={v}" for k, v in sorted(host.items())))
    return "\n".join(lines) + "\n"
