"""What systemd hears from the daemon (`Type=notify`, `WatchdogSec=`), and when: one place for it.

- READY=1 once every watched key has answered (its first value or its 404), or READY_WITHIN after start,
  whichever comes first: a metadata server down at boot must not hold the unit in "activating", and the
  daemon protects from its first second all the same.
- WATCHDOG=1 every half WatchdogSec (sd_watchdog_enabled(3)), sent by the loop itself: a wedged loop misses
  it, and systemd restarts the daemon.
- STATUS= after each moment the loop tells (a subscriber, `daemon/telling.py`), told after /status so both
  say the same.

The loop calls `tick` on each turn and sleeps no longer than `next_due`.
"""

from __future__ import annotations

from collections.abc import Callable

from watchdog.core.lifecycle import Lifecycle
from watchdog.core.moments import HoldersFound, Moment, ProcessSignalled
from watchdog.core.vocabulary import Output
from watchdog.daemon.outputs import Outputs
from watchdog.surface.notify import Notifier

READY_WITHIN = 10.0  # s: READY=1 after every watch answered, or this long, whichever first


class SystemdNotify:
    output = Output.NOTIFY

    def __init__(
        self, notifier: Notifier, outputs: Outputs, summary: Callable[[], str], *, started: float,
        watched: int,
    ) -> None:  # fmt: skip
        """`summary`: the STATUS= line (`StatusView.summary`); `started`: when the daemon started
        (monotonic); `watched`: how many keys must answer before READY=1."""
        self.notifier, self.outputs, self.summary, self.watched = notifier, outputs, summary, watched
        self._answered: set[str] = set()  # the watched keys that have answered (or 404ed)
        self.ready_by = started + READY_WITHIN  # READY=1 by then, answered or not
        self.ready_sent = False
        self._next_ping = 0.0

    def next_due(self) -> list[float | None]:
        """When `tick` has something to send (monotonic), READY=1 then WATCHDOG=1; None: nothing."""
        ping = self._next_ping if self.notifier.watchdog_interval is not None else None
        return [None if self.ready_sent else self.ready_by, ping]

    def heard(self, key: str) -> None:
        """A watched key answered: a value, an error or a 404."""
        self._answered.add(key)

    def tick(self, now: float) -> None:
        if not self.ready_sent and (len(self._answered) >= self.watched or now >= self.ready_by):
            self.ready_sent = True
            with self.outputs.guarded(Output.NOTIFY):
                self.notifier.ready(self.summary())
        interval = self.notifier.watchdog_interval
        if interval is not None and now >= self._next_ping:
            self._next_ping = now + interval
            with self.outputs.guarded(Output.NOTIFY):
                self.notifier.watchdog()

    def told(self, moment: Moment, lifecycle: Lifecycle) -> None:
        if not isinstance(moment, (HoldersFound, ProcessSignalled)):
            self.notifier.status(self.summary())

    def status(self) -> None:
        """STATUS= now, outside a moment (the HTTP listener bound, or could not)."""
        with self.outputs.guarded(Output.NOTIFY):
            self.notifier.status(self.summary())

    def stopping(self, drain_resumes: bool) -> None:
        with self.outputs.guarded(Output.NOTIFY):
            self.notifier.stopping(
                "stopping: state saved" + (", drain resumes on start" if drain_resumes else "")
            )
