"""The scanning thread: every full scan of the host's processes is made here, off the loop, and sent to
the loop as a message (`HoldersScanned`): the warm holder index's idle refreshes and the scans a drain
asks for (`scan_now`).

A drain starts from the index (daemon/runner.py: `first_wave` re-checks each indexed holder from its own
/proc entries, and scans the processes the index has not seen: a job started since), so the first SIGTERM
need not wait for a scan of every fd on the host. A scan runs here, not on the loop, because it reads
every process's /proc entries: a big host's takes 100+ ms, and a process stuck in the kernel can stall a
read of its cmdline; the loop meanwhile goes on hearing the metadata answers, the exits and systemd's
watchdog. While an event is on, the idle refresh pauses: the drain's rescans and the late-arrival watch
are the scans then.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from watchdog.core.clock import Clock, SystemClock
from watchdog.core.process import Holder
from watchdog.core.vocabulary import Output
from watchdog.daemon.draining import Scanner
from watchdog.daemon.outputs import Outputs

log = logging.getLogger("tpu-watchdog")

INDEX_FAILED = "refreshing the holder index failed"
HOLDER_REFRESH = 60.0  # s between idle refreshes of the index (and the holders gauge); each walks all fds


@dataclass(frozen=True)
class HoldersScanned:
    """One full scan of the index, sent to the loop, which keeps the last (a drain's first wave starts from
    it): who held a device, the PIDs the scan saw, and the last PID allocated before it (None: unknown; a
    test's scanner may say neither) so a drain looks at the PIDs allocated since, alone."""

    holders: tuple[Holder, ...] = ()
    pids: frozenset[int] = frozenset()
    last_pid: int | None = None
    ticket: int = 0  # the last `scan_now` ticket asked before this scan began (0: an idle refresh)
    error: str = ""  # the scan failed (a scan asked for is answered even then): why


class HolderIndex:
    """Scans at start, then every `interval` s out of step with the watches (and soon after `refresh_soon`)
    unless `paused()`, and at once when asked (`scan_now`: a drain's scans, the late-arrival watch's);
    `publish(scan)` after each scan asked for, and each refresh that finished while still not paused (the
    loop's inbox: the loop alone keeps the index)."""

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
        self._asked = 0  # the last ticket of `scan_now`
        self._answered = 0  # the last ticket a scan began after

    def start(self) -> None:
        self._thread = self._clock.spawn(self._run, "holder-index")

    def scan_now(self) -> int:
        """Scan now, paused or not, and publish the scan (failed too): its ticket, which the answer
        carries (or a later one). Called from the loop."""
        self._asked += 1
        self._wake.set()
        return self._asked

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
            asked = self._asked  # the asks before this scan: answered by it
            fresh = asked > self._answered
            if self._paused() and not fresh:
                continue
            self._answered = asked
            try:
                result = self._scanner.scan()
            except Exception as e:  # the next refresh tries again; a drain then starts from a full scan
                with self._outputs.guarded(Output.LOG):
                    log.exception("scanning the holders failed" if fresh else INDEX_FAILED)
                if fresh:  # a drain waits for it: it hears that it failed
                    with self._outputs.guarded(Output.STATUS):
                        self._publish(HoldersScanned(ticket=asked, error=f"{type(e).__name__}: {e}"))
                continue
            if fresh or not self._paused():
                scan = HoldersScanned(
                    tuple(result.holders), frozenset(getattr(result, "pids", ())),
                    getattr(result, "last_pid", None), asked,
                )  # fmt: skip
                with self._outputs.guarded(Output.STATUS):
                    self._publish(scan)
