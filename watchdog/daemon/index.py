"""The warm holder index: who held a device at the last full scan, refreshed in a thread of its own.

A drain starts from it (daemon/runner.py: `first_wave` re-checks each indexed holder from its own /proc
entries; the drain then scans the processes the index has not seen, `seen`: a job started since), so the
first SIGTERM need not wait for a scan of every fd on the host. The refresh runs in its own
thread so that the loop is never busy scanning when an event arrives (a scan of a big host takes 100+ ms;
readlink releases the GIL, so the loop and the drain get it at once). While an event is on, the refresh
pauses: the loop's late-arrival watch and the drain's rescans scan then, and publish what they find.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from watchdog.core.clock import Clock, SystemClock
from watchdog.core.process import Holder
from watchdog.core.vocabulary import Output
from watchdog.daemon.drain_thread import Scanner
from watchdog.daemon.outputs import Outputs

log = logging.getLogger("tpu-watchdog")

HOLDER_REFRESH = 60.0  # s between idle refreshes of the index (and the holders gauge); each walks all fds


@dataclass(frozen=True)
class HoldersScanned:
    """One full scan of the index, sent to the loop, which keeps the last (a drain's first wave starts from
    it): who held a device, the PIDs the scan saw, and the last PID allocated before it (None: unknown; a
    test's scanner may say neither) so a drain looks at the PIDs allocated since, alone."""

    holders: tuple[Holder, ...] = ()
    pids: frozenset[int] = frozenset()
    last_pid: int | None = None


class HolderIndex:
    """Scans at start, then every `interval` s out of step with the watches (and soon after `refresh_soon`)
    unless `paused()`; `publish(scan)` after each scan that finished while still not paused (the loop's
    inbox: the loop alone keeps the index)."""

    def __init__(
        self,
        scanner: Scanner,
        publish: Callable[[HoldersScanned], None],
        paused: Callable[[], bool],
        stop: threading.Event,
        interval: float = HOLDER_REFRESH,
        *,
        outputs: Outputs,
        clock: Clock | None = None,
    ) -> None:
        self._scanner, self._publish, self._paused, self._stop = scanner, publish, paused, stop
        self._outputs = outputs  # a failed line or publish is counted there; the refreshes go on
        self._interval, self._clock = interval, clock or SystemClock()  # the clock paces the refreshes
        self._wake = threading.Event()
        self._wake.set()  # the first refresh at once: a drain soon after start has an index
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = self._clock.spawn(self._run, "holder-index")

    def refresh_soon(self) -> None:
        """Refresh now, not in `interval` s (a drain ended: who holds a device has changed)."""
        self._wake.set()

    def join(self, timeout: float) -> None:
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        # The first refresh at once (woken); the second half an interval later, then every interval: the
        # refreshes fall half an interval after the hanging GETs' answers (every 60 s from the start, all
        # three at once), so an idle daemon's threads do not all wake at one instant and contend for the
        # GIL, switching contexts at each hand-over (`python -m bench idle` counts them).
        waits = 0
        while not self._stop.is_set():
            self._clock.wait(self._interval * (0.5 if waits == 1 else 1.0), self._wake.wait)
            waits += 1
            self._wake.clear()
            if self._stop.is_set():
                return
            if self._paused():
                continue
            try:
                result = self._scanner.scan()
            except Exception:  # the next refresh tries again; a drain then starts from a full scan
                with self._outputs.guarded(Output.LOG):
                    log.exception("refreshing the holder index failed")
                continue
            if not self._paused():
                scan = HoldersScanned(
                    tuple(result.holders), frozenset(getattr(result, "pids", ())),
                    getattr(result, "last_pid", None),
                )  # fmt: skip
                with self._outputs.guarded(Output.STATUS):
                    self._publish(scan)
