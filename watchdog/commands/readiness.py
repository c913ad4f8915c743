"""`tpu-watchdog readiness`: would each TPU holder survive a SIGTERM now? Read from /proc, no signal sent.

The commonest way to lose a checkpoint shows long before maintenance: a job whose SIGTERM is still at its
default (no jax.distributed.initialize, so no JAX preemption notifier) dies at once and saves nothing; one
that ignores SIGTERM runs on until the deadline's SIGKILL. A handler (`caught`) is necessary, not
sufficient: a Python handler installed after initialize, or a loop that never reaches the sync point, looks
the same from outside. Only `drill` (a real SIGTERM) proves a checkpoint. It scans as the daemon does (the
configuration's devices and excludes), so it judges the processes a drain would signal.

Exit status: 0 every holder catches SIGTERM; 1 at least one will lose its progress (default or ignored) or
could not be read; 3 nothing holds a TPU device; 78 a bad configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from watchdog.config.settings import add_config_arguments, load_config_or_exit
from watchdog.core.accelerators import agent_note
from watchdog.core.devices import notes_text
from watchdog.core.process import Holder
from watchdog.core.vocabulary import SIGTERM_UNKNOWN, SigtermDisposition
from watchdog.exitcodes import EXIT_LOST, EXIT_NOTHING_TO_DRILL, EXIT_OK

if TYPE_CHECKING:  # the scan is imported in run(): --help starts without it
    from watchdog.host.holders import ScanResult

# What each disposition means for the next maintenance: (ready?, the verdict an SRE reads).
VERDICTS: dict[SigtermDisposition | None, tuple[bool, str]] = {
    SigtermDisposition.CAUGHT: (True, "ready: SIGTERM is caught (a handler runs; see below for what that "
                                "does not prove)"),
    SigtermDisposition.DEFAULT: (False, "WOULD LOSE ITS PROGRESS: SIGTERM is at its default, so it dies "
                                 "at once, before any save (a JAX job needs jax.distributed.initialize())"),
    SigtermDisposition.IGNORED: (False, "WOULD BE KILLED AT THE DEADLINE: SIGTERM is ignored, so it runs on "
                                 "until SIGKILL, saving nothing on the way"),
    None: (False, f"UNKNOWN: {SIGTERM_UNKNOWN}"),
}  # fmt: skip
CANNOT_KNOW = (
    "What this cannot know: 'caught' proves a handler, not a checkpoint. A Python signal handler installed "
    "after jax.distributed.initialize() replaces JAX's notifier (no sync point is ever reached), and a loop "
    "that never calls save()/reached_preemption() swallows the SIGTERM; both look ready from here. "
    "`tpu-watchdog drill` sends a real SIGTERM and shows what the job does."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # The devices and excludes the daemon uses: judge what a drain would signal.
    add_config_arguments(parser, only=("--config", "--device", "--allow-number", "--exclude"))
    parser.add_argument("--json", action="store_true", help="print a JSON list, one verdict per holder")


def verdict(holder: Holder) -> tuple[bool, str]:
    """(ready?, the sentence) for one holder, from its SIGTERM disposition alone."""
    return VERDICTS[holder.sigterm]


def render(holders: Sequence[Holder], width: int = 110) -> str:
    """A verdict per holder, wrapped, with its command line; then what the verdicts cannot know."""
    lines = []
    for h in holders:
        ready, sentence = verdict(h)
        command = " ".join(" ".join(h.cmdline).split())[:80]  # one line, whatever the argv holds
        mark = "ok  " if ready else "LOST"
        words = h.workload.describe()
        who = f"{h.name}, {words}" if words else h.name  # the unit, container or pod to page
        lines.append(
            textwrap.fill(f"  {mark} pid {h.pid} ({who}): {sentence}", width, subsequent_indent=" " * 7)
        )
        lines.append(f"       command: {command or '-'}")
    return "\n".join(lines) + "\n\n" + textwrap.fill(CANNOT_KNOW, width) + "\n"


def as_json(holders: Sequence[Holder]) -> str:
    return json.dumps(
        [
            {
                "pid": h.pid,
                "start_time": h.identity.start_time,
                "name": h.name,
                "sigterm": h.sigterm.value if h.sigterm else None,
                "workload": h.workload.to_dict(),
                "ready": verdict(h)[0],
                "verdict": verdict(h)[1],
            }
            for h in holders
        ],
        indent=2,
    )


def run(args: argparse.Namespace) -> int:
    config = load_config_or_exit(args, os.environ)
    if isinstance(config, int):
        return config
    from watchdog.daemon.compose import host_scanner

    scanner, _ = host_scanner(config)
    return judge(scanner.scan(), scanner.patterns, args.json, sys.stdout, sys.stderr)


def judge(result: ScanResult, devices: Sequence[str], as_json_list: bool, out: TextIO, err: TextIO) -> int:
    """Print the verdicts of one scan; the exit status."""
    holders = result.holders
    err.write(notes_text(result.matched))
    if result.unreadable:
        err.write(f"note: {result.unreadable} processes could not be read (run as root to see them)\n")
    for agent in result.agents:
        err.write(agent_note(agent.pid, agent.name))
    if not holders:
        err.write(f"nothing holds a TPU device ({' '.join(devices)}): nothing to judge\n")
        return EXIT_NOTHING_TO_DRILL
    out.write(as_json(holders) + "\n" if as_json_list else render(holders))
    return EXIT_OK if all(verdict(h)[0] for h in holders) else EXIT_LOST
