"""Holders that exit while this host has no event: the job left on its own, not drained by this daemon.

On a multi-host job (and on Multislice), maintenance on one host ends the job on every host: the daemon
there SIGTERMs its holder, JAX's coordination service tells every other process to save the same step and
exit, and the other hosts' daemons see their holders go without having signalled anyone. Each such exit
is said once (journal `holder_left`, at INFO: a job that simply finishes looks the same; with how it ended
when that can be known) and counted (`tpu_watchdog_holders_left_total`), and the holders gauge and /status
drop it at once instead of at the next idle scan, so a host's record shows that its job left on its own.
Between drains the loop checks the holders of the index's last scan whenever it wakes, and wakes for it
every DEPARTURE_CHECK s while it has any (host/exits.py, no pidfds: /proc/PID/stat of each, no walk of
/proc, no fd held per holder, so an idle daemon's fds stay flat however many holders come and go; with no
holder, nothing here wakes the daemon). A holder that closes the device and keeps running is not an
exit: the next idle scan shows it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from watchdog.core.drain_record import ExitStatus
from watchdog.core.process import Holder, ProcessIdentity
from watchdog.core.vocabulary import Output
from watchdog.daemon.outputs import Outputs
from watchdog.host.exits import PidfdExitWaiter
from watchdog.host.signals import ProcessHandles
from watchdog.surface.logs import fields
from watchdog.surface.metrics import Metrics

log = logging.getLogger("tpu-watchdog")

DEPARTURE_CHECK = 5.0  # s between looks at whether a holder has exited, while there is one to look at


class Departures:
    """The holders of the last idle scan, watched for exits while no event is on and no drain runs."""

    def __init__(
        self, metrics: Metrics, outputs: Outputs, holders_now: Callable[[Sequence[Holder]], None]
    ) -> None:
        """`holders_now`: where who holds a device now is said (`Reporter.holders_now`)."""
        self.metrics, self.outputs, self.holders_now = metrics, outputs, holders_now
        self.waiter = PidfdExitWaiter(ProcessHandles(use_pidfd=False))
        self.tracked: dict[ProcessIdentity, Holder] = {}

    def track(self, holders: list[Holder]) -> None:
        """Watch the holders of a fresh scan; stop watching those it no longer shows (they released)."""
        current = {h.identity: h for h in holders}
        for identity in list(self.tracked):
            if identity not in current:
                self.waiter.unwatch(identity)
                del self.tracked[identity]
        for identity, holder in current.items():
            if identity in self.tracked or self.waiter.watch(identity) is None:
                self.tracked[identity] = holder  # the newest scan's facts (its name, its SIGTERM)

    def left(self) -> list[tuple[Holder, ExitStatus]]:
        """The tracked holders that exited since the last call (non-blocking), with how they ended."""
        if not self.tracked:
            return []
        exits = self.waiter.wait(0)
        return [(self.tracked.pop(i), status) for i, status in exits if i in self.tracked]

    def tick(self, busy: bool, holders: Sequence[Holder]) -> None:
        """Each turn of the loop: while `busy` (an event is on, a drain runs) forget the holders; else of
        `holders` (shown now: the index's latest scan) drop those that left from /status and the gauge,
        then count and say each (a scrape that sees the count sees the gauge without them)."""
        if busy:
            self.forget()
            return
        self.track(list(holders))
        left = self.left()
        if not left:
            return
        gone = {holder.identity for holder, _ in left}  # by identity: a later scan's copy may differ
        self.holders_now([h for h in holders if h.identity not in gone])
        for holder, status in left:
            how = f" ({status})" if status.known else ""
            with self.outputs.guarded(Output.METRICS):
                self.metrics.holders_left.inc()
            with self.outputs.guarded(Output.LOG):
                log.info(
                    "pid %d (%s) exited%s and no longer holds the TPU, with no event on this host and no "
                    "signal from this daemon: it left on its own (a job that finished; or, on a multi-host "
                    "job, another host's event ending the job)", holder.pid, holder.name, how,
                    extra=fields("holder_left", pid=holder.pid, exit_status=str(status)),
                )  # fmt: skip

    def next_due(self, now: float) -> float | None:
        """When the loop must look again (monotonic; `now`: it just did), or None: no holder to look at."""
        return now + DEPARTURE_CHECK if self.tracked else None

    def forget(self) -> None:
        """An event is on or a drain runs: what exits now is the drain's business, not a departure."""
        self.waiter.close()
        self.tracked.clear()
