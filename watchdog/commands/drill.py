"""`tpu-watchdog drill`: rehearse a maintenance event on this host, without the metadata server.

It does for real what the daemon would do (SIGTERM the TPU holders, wait for them or the grace, then the
on_timeout action), shows a countdown, and ends with a verdict per process: would the job have kept its
progress? On a terminal it asks first (`--yes` does not). Ctrl-C cancels the drill (nothing is SIGKILLed).
`--dry-run` says at once what a drill would signal (each holder checked with signal 0: is it there, may we
signal it), sends nothing and waits for nothing.

A real drill is a drain, so it is appended to the drain history (`STATE_DIR/history.jsonl`, under the
history's own lock: the daemon may be running) with event {key: "drill", value: "rehearsal"}, each process
with its signals, its end and its SIGTERM disposition; `host` stays empty (the drill never asks the
metadata server). A dry run is a report, not a drain: it is not recorded. A history that cannot be written
(no state dir, read-only, not root) costs one line saying so; the verdict and exit status are the same.

Exit status: 0 every holder exited in time on its own (or released the device); 1 at least one would have
lost its checkpoint (needed SIGKILL, died of SIGTERM's default action, or is still running); 3 nothing holds
a TPU device; 4 a dry run (nothing was signalled, so nothing was learned); 5 not confirmed at the prompt;
78 a bad configuration.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import replace

from watchdog.config.settings import add_config_arguments, load_config_or_exit
from watchdog.core.accelerators import agent_note
from watchdog.core.devices import notes_text
from watchdog.core.drain_record import Death, DrainRecord, End, Loss, ProcessRecord, SignalResult
from watchdog.core.ladder import Ladder
from watchdog.core.lifecycle import drain_id_at
from watchdog.core.process import Holder
from watchdog.core.vocabulary import (
    DRILL_EVENT_KEY,
    DRILL_EVENT_VALUE,
    SIGTERM_UNKNOWN,
    Outcome,
    SigtermDisposition,
)
from watchdog.exitcodes import (
    EXIT_DRILL_DECLINED,
    EXIT_DRILL_DRY_RUN,
    EXIT_LOST,
    EXIT_NOTHING_TO_DRILL,
    EXIT_OK,
)
from watchdog.store.drain_entry import entry_from_record
from watchdog.store.drain_text import totals
from watchdog.store.history import HISTORY_FILE, HistoryFile


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # What a drain uses; --grace is the rehearsed grace (the maintenance grace, 300 s by default).
    add_config_arguments(
        parser,
        only=(
            "--config",
            "--device",
            "--allow-number",
            "--exclude",
            "--grace",
            "--on-timeout",
            "--dry-run",
            "--state-dir",
        ),
    )
    parser.add_argument("--yes", action="store_true", help="signal without asking first (on a terminal)")


def would_signal(holders: Sequence[Holder], ladder: Ladder, grace: float) -> list[str]:
    """A dry run's report: for each holder, whether the ladder's asking signal could reach it now (signal 0
    through the same identity check as a real signal) and what the deadline would do."""
    from watchdog.host.signals import DryRunSignaller, ProcessHandles

    handles = ProcessHandles()
    try:
        signaller = DryRunSignaller(handles)
        signaller.prepare(h.identity for h in holders)
        lines = []
        for h in holders:
            result = signaller.send(h.identity, ladder.ask.signum)
            if result is SignalResult.SENT:
                what = _would_happen(h, ladder, grace)
            elif result is SignalResult.DENIED:
                what = "could NOT be signalled: permission denied (run the drill as root)"
            else:
                what = f"would not be signalled: {result.value.replace('_', ' ')}"
            lines.append(f"  pid {h.pid} ({h.name}): {what}")
        return lines
    finally:
        handles.close()


def _would_happen(holder: Holder, ladder: Ladder, grace: float) -> str:
    """What a real drain would do to `holder` as `ladder` says, from its SIGTERM disposition (seen now, no
    signal sent; a ladder asking with another signal says only what it would send)."""
    ask, force = ladder.ask.name, ladder.force
    then = f"{force.name} if it still holds a device" if force else "reported if it still holds"
    if ladder.ask.signum != signal.SIGTERM:
        return f"would get {ask} now, then after {grace:.0f} s: {then}"
    if holder.sigterm is SigtermDisposition.DEFAULT:
        return f"would get {ask} now and die of it at once: it has no handler, so it would save nothing"
    if holder.sigterm is SigtermDisposition.IGNORED:
        if force is not None:
            return f"would get {ask} now and ignore it: after {grace:.0f} s, {force.name} (its progress lost)"
        return (
            f"would get {ask} now and ignore it: after {grace:.0f} s, left running and reported "
            "(on_timeout = leave); the maintenance then stops it, unsaved"
        )
    if holder.sigterm is SigtermDisposition.CAUGHT:
        return f"would get {ask} now (it has a handler), then after {grace:.0f} s: {then}"
    unknown = f"what it does with it unknown ({SIGTERM_UNKNOWN})"
    return f"would get {ask} now, {unknown}; after {grace:.0f} s: {then}"


def confirmed(count: int, grace: float, ladder: Ladder) -> bool:
    """Ask on the terminal before signalling real jobs; anything but yes is no."""
    then = ladder.force.name if ladder.force else "report"
    sys.stderr.write(
        f"{ladder.ask.name} {count} process(es) now, and {then} what still holds a device after "
        f"{grace:.0f} s? [y/N] "
    )
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


def verdict(proc: ProcessRecord, started: float, dry_run: bool) -> tuple[bool, str]:
    """(kept its progress?, the sentence an SRE reads) for one process of the drain record."""
    who = f"pid {proc.identity.pid} ({proc.name})"
    took = f"{proc.ended_at - started:.1f} s" if proc.ended_at is not None else "?"
    status = proc.exit_status
    if dry_run:
        return True, f"{who}: would be sent SIGTERM (dry run: nothing was sent, nothing learned)"
    loss = proc.loss()
    if loss is Loss.KILLED:
        return False, f"{who}: NEEDED SIGKILL: still holding the TPU at the deadline; its progress is lost"
    if loss is Loss.SIGTERM_DEFAULT:
        inferred = (
            " (inferred: its SIGTERM was at the default before the signal; its exit status could not be read)"
            if proc.sigterm_death is Death.INFERRED
            else ""
        )
        return False, (
            f"{who}: DID NOT HANDLE SIGTERM: died of its default action after {took}, so it saved no "
            f"checkpoint{inferred} (a JAX job needs jax.distributed.initialize() for its preemption handler)"
        )
    if loss is Loss.STILL_RUNNING:
        return False, f"{who}: STILL RUNNING after the grace (on_timeout = leave)"
    if proc.end is End.EXITED:
        how = f", {status}" if status is not None and status.known else ""
        return True, f"{who}: exited in time, after {took}{how}"
    if proc.end is End.RELEASED:
        return True, f"{who}: released the TPU after {took} and kept running"
    if proc.end in (End.GONE, End.IDENTITY_CHANGED):
        return True, f"{who}: gone before it was signalled"
    return True, f"{who}: never signalled (PID 1, the watchdog itself or a kernel thread)"


def run(args: argparse.Namespace) -> int:
    config = load_config_or_exit(args, os.environ)
    if isinstance(config, int):
        return config
    from watchdog.daemon.compose import build_drill
    from watchdog.daemon.draining import DrainListener

    out = sys.stdout
    from watchdog.host.holders import ScanResult

    drill = build_drill(config)
    scanned = drill.scanner.scan()
    holders = scanned.holders
    if isinstance(scanned, ScanResult):
        sys.stderr.write(notes_text(scanned.matched))
        sys.stderr.write("".join(agent_note(agent.pid, agent.name) for agent in scanned.agents))
    if not holders:
        out.write(f"nothing holds a TPU device ({' '.join(config.devices)}): nothing to rehearse\n")
        return EXIT_NOTHING_TO_DRILL
    grace = config.maintenance_grace
    if config.dry_run:
        out.write(f"drill --dry-run: {len(holders)} process(es) hold a TPU device; nothing was sent:\n")
        out.write("\n".join(would_signal(holders, drill.plan.ladder, grace)) + "\n")
        out.write("a real drill (without --dry-run) shows whether each one saves its checkpoint in time\n")
        return EXIT_DRILL_DRY_RUN
    out.write(
        f"drill: {drill.plan.ladder.ask.name} to {len(holders)} process(es) now, then up to {grace:.0f} s "
        f"for them to exit, then {config.on_timeout}. Ctrl-C cancels (no SIGKILL).\n"
    )
    for h in holders:
        command = " ".join(" ".join(h.cmdline).split())[:60]  # one line, whatever the argv holds
        out.write(f"  pid {h.pid:<8} {h.name:<16} {' '.join(h.devices)}  {command}\n")
    out.flush()
    if sys.stdin.isatty() and not args.yes and not confirmed(len(holders), grace, drill.plan.ladder):
        out.write("not confirmed: nothing was signalled\n")
        return EXIT_DRILL_DECLINED

    from watchdog.host.exits import Wakeup

    cancel, wake = threading.Event(), Wakeup()

    def on_interrupt(*_: object) -> None:
        cancel.set()
        wake.ring()  # the drain sleeps in poll(2) until its next due time: this ends the sleep

    signal.signal(signal.SIGINT, on_interrupt)
    latest: list[DrainRecord] = []  # the last published copy only (one is published every 0.1 s)
    finished = threading.Event()
    started = time.monotonic()

    def countdown() -> None:
        tty = sys.stderr.isatty()
        while not finished.wait(1.0 if tty else 10.0):
            record = latest[0] if latest else None
            pending = len(record.pending()) if record else len(holders)
            elapsed = time.monotonic() - started
            left = max(0.0, grace - elapsed)
            line = f"  +{elapsed:5.0f} s: {pending} still running, {left:.0f} s to the deadline"
            sys.stderr.write(("\r" + line) if tty else (line + "\n"))
            sys.stderr.flush()
        if tty:
            sys.stderr.write("\n")

    class Progress(DrainListener):
        def updated(self, record: DrainRecord) -> None:
            latest[:] = [record]

    ticker = threading.Thread(target=countdown, name="countdown", daemon=True)
    ticker.start()
    record = drill.drain(holders, Progress(), cancel, wake)
    finished.set()
    ticker.join(timeout=2)
    entry = drill_entry(record)
    out.write(f"\ndrill {record.outcome.value if record.outcome else 'ended'}: {totals(entry)}\n")
    kept_all = True
    for proc in record.processes.values():
        kept, sentence = verdict(proc, record.started, record.dry_run)
        kept_all = kept_all and kept
        out.write(f"  {'ok  ' if kept else 'LOST'} {sentence}\n")
    if record.outcome is Outcome.CANCELLED:
        out.write("the drill was cancelled: nothing was SIGKILLed\n")
    out.flush()
    recorded(config.state_dir, entry)
    return EXIT_OK if kept_all else EXIT_LOST


def drill_entry(record: DrainRecord) -> dict[str, object]:
    """The drill as the history keeps a drain (an id of its own kind: never one of the daemon's)."""
    named = replace(
        record, drain_id=f"drill-{drain_id_at(record.started_wall)}", event_key=DRILL_EVENT_KEY,
        event_value=DRILL_EVENT_VALUE,
    )  # fmt: skip
    return entry_from_record(named, host={})


def recorded(state_dir: str, entry: dict[str, object]) -> bool:
    """Append the drill to the history, and say in one line whether it is there and, if not, why."""
    try:
        HistoryFile(state_dir, load=False).write(entry)
    except OSError as error:
        if error.errno == errno.ENOENT and not os.path.isdir(state_dir):
            why = f"{state_dir} does not exist (the daemon makes it; --state-dir names another)"
        elif error.errno in (errno.EACCES, errno.EPERM):
            why = f"{state_dir}: permission denied (run the drill as root)"
        else:
            why = f"{os.path.join(state_dir, HISTORY_FILE)}: {error.strerror or error}"
        sys.stderr.write(f"drill not recorded in the drain history: {why}\n")
        return False
    sys.stdout.write(f"recorded in the drain history as {entry['id']}: `tpu-watchdog history` shows it\n")
    return True
