"""Site hooks: optional commands run when an event starts, when a drain ends, and when an event clears.

A hook must never delay or block the drain: `run_hook` starts it on a background thread and returns at once.
Each hook runs without a shell (argv list), stdin from /dev/null, in its own process group (so a timeout
kills everything it started), with its output captured up to a bound and logged. A missing executable, a
non-zero exit or a timeout is logged, never raised.

Hooks run as the daemon's user, root: the configuration loader refuses hooks that anyone else could have
chosen, or that hand a shell a string (config/trust.py), before they get here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from watchdog.core.clock import utc_time

HOOK_NAMES = ("on_event_start", "on_drain_end", "on_event_clear")
OUTPUT_LIMIT = 16 * 1024  # bytes of a hook's output kept for the log; the rest is read and dropped
EXIT_DRAIN_WINDOW = 1.0  # after the hook exits, how long to keep reading output a background child holds open

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HookContext:
    """What a hook is told about, through its environment."""

    event_source: str  # the metadata key, e.g. "maintenance-event"
    event_value: str  # e.g. "TERMINATE_ON_HOST_MAINTENANCE"
    event_id: str = ""
    outcome: str | None = None  # the drain's outcome (on_drain_end, on_event_clear)
    deadline: float | None = None  # wall-clock seconds: when survivors are SIGKILLed
    dry_run: bool = False
    extra: Mapping[str, str] = field(default_factory=dict)  # more variables, full names

    def environment(self, hook: str) -> dict[str, str]:
        deadline = "" if self.deadline is None else utc_time(self.deadline, "seconds")  # never raises
        return {
            "TPU_WATCHDOG_HOOK": hook,
            "TPU_WATCHDOG_EVENT": f"{self.event_source}={self.event_value}",
            "TPU_WATCHDOG_EVENT_SOURCE": self.event_source,
            "TPU_WATCHDOG_EVENT_VALUE": self.event_value,
            "TPU_WATCHDOG_EVENT_ID": self.event_id,
            "TPU_WATCHDOG_OUTCOME": self.outcome or "",
            "TPU_WATCHDOG_DEADLINE": deadline,
            "TPU_WATCHDOG_DEADLINE_EPOCH": "" if self.deadline is None else f"{self.deadline:.3f}",
            "TPU_WATCHDOG_DRY_RUN": "1" if self.dry_run else "0",
            **self.extra,
        }


@dataclass(frozen=True)
class HookResult:
    """How a hook went. `status`: ok | failed (non-zero exit or killed by a signal) | timed_out |
    killed (at shutdown) | not_run (could not be started)."""

    hook: str
    argv: tuple[str, ...]
    status: str
    returncode: int | None
    duration: float
    output: str
    dropped_bytes: int = 0
    error: str = ""


class HookSettings(Protocol):
    """What `HookRunner.from_config` reads. The configuration (`Config`) has these: named here so that the
    hooks need not import the configuration."""

    @property
    def hook_on_event_start(self) -> Sequence[str] | None: ...
    @property
    def hook_on_drain_end(self) -> Sequence[str] | None: ...
    @property
    def hook_on_event_clear(self) -> Sequence[str] | None: ...
    @property
    def hook_timeout(self) -> float: ...


class HookRun:
    """One hook running in the background."""

    def __init__(self, hook: str, argv: tuple[str, ...]) -> None:
        self.hook = hook
        self.argv = argv
        self.result: HookResult | None = None
        self._finished = threading.Event()
        self._lock = threading.Lock()  # guards the process group against a kill after the reap
        self._pid: int | None = None
        self._reaped = False
        self._killed_by = ""
        self.thread: threading.Thread | None = None

    def wait(self, timeout: float | None = None) -> HookResult | None:
        """The result once the hook is done (None if still running after `timeout` s)."""
        self._finished.wait(timeout)
        return self.result

    @property
    def done(self) -> bool:
        return self._finished.is_set()

    def kill_reason(self) -> str:
        """Why the hook was (or is to be) killed: "timeout", "shutdown", or "" if it was not."""
        return self._killed_by

    def kill(self, why: str) -> None:
        """SIGKILL the hook's whole process group, if its leader has not been reaped yet."""
        with self._lock:
            self._killed_by = self._killed_by or why
            if self._pid is None or self._reaped:
                return  # not started yet (it is killed as soon as it is), or already reaped
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._pid, signal.SIGKILL)


class HookRunner:
    """Starts hooks in the background and keeps track of them until `close`."""

    def __init__(
        self,
        commands: Mapping[str, Sequence[str] | None],
        timeout: float,
        *,
        environ: Mapping[str, str] | None = None,
        output_limit: int = OUTPUT_LIMIT,
    ) -> None:
        unknown = set(commands) - set(HOOK_NAMES)
        if unknown:
            raise ValueError(f"unknown hooks {sorted(unknown)}; known: {', '.join(HOOK_NAMES)}")
        self.commands = {name: tuple(argv) if argv else None for name, argv in commands.items()}
        self.timeout = timeout
        self.environ = environ
        self.output_limit = output_limit
        self._runs: list[HookRun] = []
        self._lock = threading.Lock()
        self._closed = False
        self._queue: queue.SimpleQueue[tuple[HookRun, dict[str, str]] | None] = queue.SimpleQueue()
        self._dispatcher: threading.Thread | None = None

    @classmethod
    def from_config(cls, config: HookSettings) -> HookRunner:
        commands = {
            "on_event_start": config.hook_on_event_start,
            "on_drain_end": config.hook_on_drain_end,
            "on_event_clear": config.hook_on_event_clear,
        }
        return cls(commands, config.hook_timeout)

    def run_hook(self, hook: str, context: HookContext) -> HookRun | None:
        """Start `hook` (if one is configured) and return at once; None when there is nothing to run."""
        if hook not in HOOK_NAMES:
            raise ValueError(f"unknown hook {hook!r}; known: {', '.join(HOOK_NAMES)}")
        argv = self.commands.get(hook)
        if argv is None:
            return None
        env = {**(os.environ if self.environ is None else self.environ), **context.environment(hook)}
        run = HookRun(hook, argv)
        with self._lock:
            if self._closed:
                log.warning("hook %s not run: the daemon is shutting down", hook)
                return None
            self._runs = [r for r in self._runs if not r.done] + [run]
            if self._dispatcher is None:
                self._dispatcher = threading.Thread(
                    target=self._dispatch, name="hook-dispatcher", daemon=True
                )
                self._dispatcher.start()
        self._queue.put((run, env))  # the dispatcher starts its thread: not even that waits here
        return run

    def close(self, timeout: float) -> bool:
        """Wait up to `timeout` s for running hooks, then kill the rest. True if all had finished by then."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._closed = True
            runs = list(self._runs)
            dispatcher = self._dispatcher
        all_done = True
        for run in runs:
            if run.wait(max(0.0, deadline - time.monotonic())) is None:
                all_done = False
                run.kill("shutdown")
        self._queue.put(None)
        if dispatcher is not None:
            dispatcher.join(5.0)
        for run in runs:
            if run.thread is not None:
                run.thread.join(5.0)
        return all_done

    def _dispatch(self) -> None:
        while (item := self._queue.get()) is not None:
            run, env = item
            run.thread = threading.Thread(target=self._supervise, args=(run, env), name=f"hook-{run.hook}")
            run.thread.daemon = True
            run.thread.start()

    def _supervise(self, run: HookRun, env: dict[str, str]) -> None:
        started = time.monotonic()
        try:
            result = self._run(run, env, started)
        except Exception as error:  # noqa: BLE001 - a hook must never take the daemon down; log it instead
            result = HookResult(
                run.hook, run.argv, "not_run", None, time.monotonic() - started, "", 0, repr(error)
            )
        run.result = result
        with contextlib.suppress(Exception):  # a result line that raises must not leave the run unfinished
            _log_result(result)
        run._finished.set()

    def _run(self, run: HookRun, env: dict[str, str], started: float) -> HookResult:
        if run.kill_reason():
            return HookResult(
                run.hook, run.argv, "killed", None, 0.0, "", 0, "the daemon stopped before it started"
            )
        try:
            proc = subprocess.Popen(
                run.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                env=env, start_new_session=True, close_fds=True,
            )  # fmt: skip
        except OSError as error:
            return HookResult(
                run.hook, run.argv, "not_run", None, time.monotonic() - started, "", 0, str(error)
            )
        with run._lock:
            run._pid = proc.pid
        if run.kill_reason():
            run.kill(run.kill_reason())  # close() came while it was starting
        assert proc.stdout is not None  # noqa: S101 - stdout=PIPE was asked for
        with proc.stdout, selectors.DefaultSelector() as selector:
            output, dropped, timed_out = self._collect(run, proc.pid, proc.stdout.fileno(), selector, started)
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # a zombie now, or soon after SIGKILL
        with run._lock:
            returncode = proc.wait()
            run._reaped = True
        if timed_out:
            status = "timed_out"
        elif run.kill_reason():
            status = "killed"
        else:
            status = "ok" if returncode == 0 else "failed"
        text = output.decode("utf-8", errors="replace")
        return HookResult(run.hook, run.argv, status, returncode, time.monotonic() - started, text, dropped)

    def _collect(
        self, run: HookRun, pid: int, out: int, selector: selectors.BaseSelector, started: float
    ) -> tuple[bytes, int, bool]:
        """Read output until the hook exits (and its output ends) or the timeout; kill it at the timeout."""
        output, dropped = bytearray(), 0
        deadline = started + self.timeout
        pidfd = _pidfd_open(pid)
        selector.register(out, selectors.EVENT_READ, "out")
        if pidfd is not None:
            selector.register(pidfd, selectors.EVENT_READ, "exit")
        exited_at: float | None = None
        eof = False
        try:
            while not (eof and exited_at is not None):
                now = time.monotonic()
                if exited_at is None and now >= deadline:
                    run.kill("timeout")
                    return bytes(output), dropped, True
                if exited_at is not None and now >= min(deadline, exited_at + EXIT_DRAIN_WINDOW):
                    break
                wait = (deadline if exited_at is None else min(deadline, exited_at + EXIT_DRAIN_WINDOW)) - now
                if pidfd is None:
                    wait = min(wait, 0.1)
                for key, _ in selector.select(wait):
                    if key.data == "exit":
                        exited_at = time.monotonic()
                        selector.unregister(key.fd)
                        continue
                    chunk = os.read(out, 65536)
                    if not chunk:
                        eof = True
                        selector.unregister(out)
                    kept = max(0, min(len(chunk), self.output_limit - len(output)))
                    output += chunk[:kept]
                    dropped += len(chunk) - kept
                if exited_at is None and pidfd is None and _has_exited(pid):
                    exited_at = time.monotonic()
        finally:
            if pidfd is not None:
                os.close(pidfd)
        return bytes(output), dropped, False


def _pidfd_open(pid: int) -> int | None:
    """A pidfd (readable when the process exits), or None where the kernel has none (then poll)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _has_exited(pid: int) -> bool:
    """Whether `pid` (our child) has exited, without reaping it."""
    status = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    return status is not None


def _log_result(result: HookResult) -> None:
    command = " ".join(result.argv)
    took = f"{result.duration:.2f} s"
    output = result.output.strip()
    if result.dropped_bytes:
        output += f"\n[... {result.dropped_bytes} more bytes of output dropped]"
    shown = f"; output:\n{output}" if output else "; no output"
    if result.status == "ok":
        log.info("hook %s (%s) succeeded in %s%s", result.hook, command, took, shown)
    elif result.status == "not_run":
        log.error("hook %s (%s) could not be run: %s", result.hook, command, result.error)
    elif result.status == "timed_out":
        log.error(
            "hook %s (%s) timed out after %s: killed with its process group%s",
            result.hook,
            command,
            took,
            shown,
        )
    elif result.status == "killed":
        log.warning("hook %s (%s) killed at shutdown after %s%s", result.hook, command, took, shown)
    else:
        code = result.returncode or 0
        how = f"exited {code}" if code >= 0 else f"was killed by signal {-code}"
        log.error("hook %s (%s) failed: %s after %s%s", result.hook, command, how, took, shown)
