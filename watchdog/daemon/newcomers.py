"""Who may be signalled that nobody signalled before: late arrivals while an event is on, and the wait for a
restored event to be confirmed after a restart. The loop asks, and tells a running drain (`Admission`).

After a restart, events on file are confirmed by the metadata server's first answer before anyone new is
signalled. If it cannot be heard within CONFIRM_WAIT, the event is taken as still on (the maintenance is
then most likely still coming) until its deadline; past its deadline, an unheard event signals nobody new.
Processes signalled before the restart keep their deadline and their SIGKILL: a resumed drain starts at
once, and what still holds a device at the deadline is killed, heard or not (a clear heard in time cancels
the drain, as ever). The gate is per drain: a drain one of whose events is confirmed admits newcomers.

A SIGTERM on file only as an intent (the daemon died between writing it ahead and sending it) may never
have reached its process: it is never sent again, but its process waits like a newcomer: no SIGKILL before
the event is confirmed (or taken as still on), none at all if it cleared meanwhile (`possibly_signalled`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from watchdog.core.lifecycle import Lifecycle
from watchdog.core.process import Holder, ProcessIdentity
from watchdog.core.vocabulary import Output
from watchdog.daemon.outputs import Outputs
from watchdog.store.records import SignalRecord
from watchdog.store.statefile import StateStore
from watchdog.surface.logs import fields

log = logging.getLogger("tpu-watchdog")

CONFIRM_WAIT = 10.0  # s after start that an unconfirmed event on file signals nobody new


class Newcomers:
    def __init__(
        self, lifecycle: Lifecycle, started_wall: float, confirm_wait: float = CONFIRM_WAIT,
        unconfirmed: Iterable[SignalRecord] = (), *, outputs: Outputs, ask: str,
    ) -> None:  # fmt: skip
        """`unconfirmed`: the signals on file only as intents; `ask`: the ladder's asking signal, by name."""
        self.lifecycle, self.outputs = lifecycle, outputs
        # Replaced whole (a drain's order carries a copy); emptied as drains take them on.
        self.possibly_signalled = frozenset(s.identity for s in unconfirmed if s.signal == ask)
        self.confirm_wait = confirm_wait
        self.unconfirmed_until = started_wall + confirm_wait
        self._said = False

    def admitted(self, now: float) -> bool:
        """The lifecycle's verdict (`Lifecycle.admits_newcomers`), said once when the metadata server has
        not confirmed the event on file within the confirmation wait."""
        life = self.lifecycle
        admit = life.admits_newcomers(now, self.unconfirmed_until)
        unconfirmed = life.events and not any(e.confirmed for e in life.events.values())
        if unconfirmed and now >= self.unconfirmed_until and not self._said:
            self._said = True
            with self.outputs.guarded(Output.LOG):  # the verdict stands whatever its line does
                log.warning(
                    "the metadata server has not confirmed the event on file within %.0f s of start: %s",
                    self.confirm_wait,
                    "taking it as still on until its deadline" if admit else "its deadline has passed, so "
                    "nobody new is signalled (those signalled before keep their deadline)",
                )  # fmt: skip
        return admit

    def next_due(self, now: float) -> float | None:
        """When time alone next changes `admitted`, or owes its line (a wall time after `now`), or None."""
        life = self.lifecycle
        times = [life.admission_changes(now, self.unconfirmed_until)]
        unconfirmed = life.events and not any(e.confirmed for e in life.events.values())
        if unconfirmed and not self._said and now < self.unconfirmed_until:
            times.append(self.unconfirmed_until)
        return min((t for t in times if t is not None), default=None)

    @property
    def gave_up_waiting(self) -> bool:
        return self._said

    def taken_on(self, drained: Iterable[ProcessIdentity]) -> None:
        """A drain (admitted) took these processes on: from now on they count as signalled."""
        self.possibly_signalled = self.possibly_signalled.difference(drained)


def late_arrivals(
    holders: Sequence[Holder],
    store: StateStore,
    outputs: Outputs,
    unsure: frozenset[ProcessIdentity],
    ask: str,
) -> list[Holder]:
    """While drained events are on, of a scan's `holders`: who holds a device now that this event has not
    signalled (one asking signal, `ask` by name, per process per event), or only possibly (`unsure`: its
    drain SIGKILLs it at the deadline, without a second SIGTERM)."""
    signalled = {s.identity for s in store.state.signals if s.signal == ask} - unsure
    newcomers = [h for h in holders if h.identity not in signalled]
    if newcomers:
        with outputs.guarded(Output.LOG):  # said before its drain starts: it must not stop that drain
            log.warning(
                "late arrival: %s opened a TPU device while the event is still on: it joins the "
                "event's drain, reopened, with the same deadline",
                ", ".join(f"pid {h.pid} ({h.name})" for h in newcomers),
                extra=fields("late_arrival", pids=" ".join(str(h.pid) for h in newcomers)),
            )  # fmt: skip
    return newcomers
