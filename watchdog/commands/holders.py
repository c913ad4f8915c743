"""`tpu-watchdog holders`: list the processes holding the TPU device files, like `lsof /dev/accel*`.

Exit 0 when something holds a device, 1 when nothing does (so scripts can test it), 2 on a usage error, 78
on a bad configuration (the daemon's: `--config`, else /etc/tpu-watchdog/config.toml when it exists).
Start-up is kept light on purpose (it runs in shells and probes): only the scanner and the standard library;
psutil, for the facts of each holder (`watchdog/host/facts.py`), only once there is a holder to describe.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from watchdog.config.settings import add_config_arguments, load_config_or_exit
from watchdog.core.accelerators import HostFacts, Profile, agent_note, choose_profile, gpu_agents
from watchdog.core.devices import notes_text, parse_number
from watchdog.core.process import Holder
from watchdog.exitcodes import EXIT_NO_HOLDERS, EXIT_OK, EXIT_USAGE
from watchdog.host.devices import SYS
from watchdog.host.holders import Excludes, HolderScanner, ScanResult, nodes_present

if TYPE_CHECKING:  # typing only: psutil is imported when there are holders to describe
    from watchdog.core.process import ProcessIdentity
    from watchdog.host.facts import HolderFacts

    Facts = Mapping[ProcessIdentity, HolderFacts]

COLUMNS = (
    *("COMMAND", "PID", "PPID", "USER", "STARTED", "CHILDREN", "SIGTERM", "FD-DEVICES"),
    *("WORKLOAD", "CGROUP", "ARGS"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # The daemon's devices (devices.patterns, extra_paths, allow_numbers from its file, TPU_WATCHDOG_* and
    # these flags), so `holders` lists what the daemon would drain, not what the defaults would match.
    add_config_arguments(parser, only=("--config", "--device", "--allow-number"))
    parser.add_argument(
        "--extra-path",
        action="append",
        metavar="PATH",
        dest="extra_paths",
        default=[],
        help="another file whose holders count, repeatable, beside devices.extra_paths (e.g. "
        "/tmp/libtpu_lockfile)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list of holders instead of a table")
    parser.add_argument(
        "--proc-root", default="/proc", metavar="DIR", help="the proc tree to read (default /proc)"
    )
    parser.add_argument(
        "--node-root",
        metavar="DIR",
        help="where the node's kubelet files are (DIR/var/lib/kubelet, DIR/var/log/pods; default: as PID 1 "
        "sees them, then /)",
    )
    parser.add_argument(
        "--sys-root", default=SYS, metavar="DIR", help="the sysfs tree that classifies devices (default /sys)"
    )


def as_json(holders: Sequence[Holder], facts: Facts) -> str:
    import json  # only --json pays for it

    return json.dumps([_entry(h, facts.get(h.identity)) for h in holders], indent=2)


def _entry(h: Holder, facts: HolderFacts | None) -> dict[str, object]:
    """One holder in --json; the keys from "user" on are `holder_facts`', null where unknown."""
    return {
        "pid": h.pid,
        "start_time": h.identity.start_time,
        "name": h.name,
        "cmdline": list(h.cmdline),
        "uid": h.uid,
        "ppid": h.ppid,
        "devices": list(h.devices),
        "cgroup": h.cgroup,
        "workload": h.workload.to_dict(),  # docs/holder-identity.md; null fields where unknown
        "sigterm": h.sigterm.value if h.sigterm else None,  # caught, ignored, default; null: not told
        "user": None if facts is None else facts.user,
        "create_time": None if facts is None else facts.create_time,
        "children": None if facts is None or facts.children is None else list(facts.children),
    }


def as_table(holders: Sequence[Holder], facts: Facts) -> str:
    rows = [COLUMNS] + [_row(h, facts.get(h.identity)) for h in holders]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
    lines = []
    for row in rows:
        padded = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        lines.append("  ".join([*padded, row[-1]]))
    return "\n".join(lines)


def _row(h: Holder, facts: HolderFacts | None) -> tuple[str, ...]:
    """One holder in the table: "-" where a fact is unknown, the uid itself where the user is."""
    user = facts.user if facts is not None and facts.user is not None else str(h.uid)
    created = None if facts is None else facts.create_time
    started = "-" if created is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(created))
    children = None if facts is None else facts.children
    return (
        h.name,
        str(h.pid),
        str(h.ppid),
        user,
        started,
        ",".join(map(str, children)) if children else "-",
        h.sigterm.value if h.sigterm else "-",
        ",".join(h.devices),
        h.workload.describe() or "-",
        h.cgroup or "-",
        " ".join(" ".join(h.cmdline).split()) or "-",  # one line, whatever the argv holds (python -c "...")
    )


def _summary(result: ScanResult, patterns: Sequence[str]) -> str:
    if not result.devices:
        return f"no TPU device file matches {' '.join(patterns)}"
    skipped = []
    if result.unreadable:
        skipped.append(f"{result.unreadable} unreadable (run as root to see them)")
    if result.vanished:
        skipped.append(f"{result.vanished} exited while scanned")
    tail = f"; {', '.join(skipped)}" if skipped else ""
    return f"no process holds {' '.join(result.devices)} ({result.scanned} processes scanned{tail})"


def run(args: argparse.Namespace) -> int:
    config = load_config_or_exit(args, os.environ)
    if isinstance(config, int):
        return config
    # Without --device (or devices.patterns set), a GPU host's own patterns and agents, as the daemon's.
    gpu = config.source("devices.patterns").kind == "default" and choose_profile(config.profile, HostFacts(
        gpu_nodes=nodes_present(config.nvidia_devices), tpu_nodes=nodes_present(config.devices)
    )).profile is Profile.NVIDIA_GPU  # fmt: skip
    patterns = list(config.nvidia_devices if gpu else config.devices)
    extra_paths = [*config.extra_paths, *args.extra_paths]
    if any(not p for p in args.extra_paths):
        sys.stderr.write("tpu-watchdog holders: error: --extra-path needs a non-empty value\n")
        return EXIT_USAGE
    for flag, root in (
        ("--proc-root", args.proc_root),
        ("--node-root", args.node_root),
        ("--sys-root", args.sys_root),
    ):
        if root is not None and not os.path.isdir(root):
            sys.stderr.write(f"tpu-watchdog holders: error: {flag} {root}: not a directory\n")
            return EXIT_USAGE
    scanner = HolderScanner(
        patterns=patterns, extra_paths=extra_paths, proc_root=args.proc_root, node_root=args.node_root,
        allow_numbers=[parse_number(text) for text in config.allow_numbers], sys_root=args.sys_root,
        excludes=Excludes(agents=gpu_agents(config.gpu_agents) if gpu else frozenset()),
    )  # fmt: skip
    result = scanner.scan()
    sys.stderr.write(notes_text(result.matched))
    sys.stderr.write("".join(agent_note(agent.pid, agent.name) for agent in result.agents))
    facts: Facts = {}
    if result.holders:
        from watchdog.host.facts import holder_facts  # psutil: only with holders to describe

        facts = holder_facts(result.holders, args.proc_root)
    if args.json:
        sys.stdout.write(as_json(result.holders, facts) + "\n")
    elif result.holders:
        sys.stdout.write(as_table(result.holders, facts) + "\n")
    if not result.holders:
        sys.stderr.write(_summary(result, patterns) + "\n")
        return EXIT_NO_HOLDERS
    if result.unreadable:
        sys.stderr.write(f"note: {result.unreadable} processes could not be read (run as root to see them)\n")
    return EXIT_OK
