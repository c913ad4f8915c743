"""The loop's verdicts on the watched values, and the ones time alone brings.

When a maintenance notice's SIGTERM goes: at the notice (the default), or `events.maintenance_lead` before
the window upcoming-maintenance announces (`before-window`, for GPU VMs' hour of notice: the job trains on
until then); and when `upcoming_maintenance.drain_before_window` drains for an announced window. The rules
are `core/policy.py`'s; this asks them again when upcoming-maintenance changes and whenever the loop wakes
(it wakes when `next_due` says), and says once per notice when its SIGTERM will go.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from watchdog.core.clock import utc_time
from watchdog.core.lifecycle import Action, Lifecycle, Trigger
from watchdog.core.metadata_values import MaintenanceEvent, UpcomingMaintenance, WatchedValue
from watchdog.core.policy import Policy, maintenance_drain_due, trigger, upcoming_drain_due
from watchdog.core.vocabulary import MAINTENANCE_EVENT, UPCOMING_MAINTENANCE, Output
from watchdog.daemon.outputs import Outputs

log = logging.getLogger("tpu-watchdog")


class NoticeTiming:
    """Verdicts for `lifecycle`, on `values()` (the last value of each source, as /status shows) under
    `policy`: the one policy in force (daemon/reload.py replaces it once no event is on)."""

    def __init__(
        self,
        values: Callable[[], Mapping[str, WatchedValue]],
        lifecycle: Lifecycle,
        policy: Policy,
        outputs: Outputs,
    ) -> None:
        self.values, self.lifecycle, self.policy, self.outputs = values, lifecycle, policy, outputs
        self._said: tuple[str, float] | None = None

    def verdict(self, source: str, value: WatchedValue, now: float) -> Trigger | None:
        """The policy's verdict on `value`; for a maintenance notice not yet an event, with the window
        upcoming-maintenance announces (once the event is on, its drain is never put off again)."""
        policy = self.policy
        upcoming = self.values().get(UPCOMING_MAINTENANCE.source)
        on = source in self.lifecycle.events
        window = upcoming if isinstance(upcoming, UpcomingMaintenance) and not on else None
        if isinstance(value, MaintenanceEvent) and window is not None:
            due = maintenance_drain_due(value, policy, now, window)
            if due is not None and now < due and self._said != (value.raw, due):
                self._said = (value.raw, due)
                with self.outputs.guarded(Output.LOG):  # the verdict stands whatever its line does
                    log.info(
                        "maintenance-event %s: SIGTERM at %s, %.0f s before the maintenance window starts "
                        '(events.maintenance_sigterm = "before-window")',
                        value.raw, utc_time(due), policy.maintenance_lead,
                    )  # fmt: skip
        return trigger(value, policy, now, window)

    def due(self, now: float) -> list[Action]:
        """What the time brings: a maintenance notice put off until before its window (judged again: the
        window may have moved), a drain `drain_before_window` asks for."""
        values, actions = self.values(), []
        source = MAINTENANCE_EVENT.source
        notice = values.get(source)
        if notice is not None and source not in self.lifecycle.events:
            actions += self.lifecycle.observe(source, self.verdict(source, notice, now), now)
        upcoming = values.get(UPCOMING_MAINTENANCE.source)
        if isinstance(upcoming, UpcomingMaintenance):
            at = upcoming_drain_due(upcoming, self.policy)
            if at is not None and now >= at:
                verdict = trigger(upcoming, self.policy, now)
                actions += self.lifecycle.observe(UPCOMING_MAINTENANCE.source, verdict, now)
        return actions

    def next_due(self, now: float) -> float | None:
        """When `due` may next bring something (a wall time after `now`), or None: only a new value can.
        The loop sleeps until then: a notice put off until before its window is SIGTERMed on time."""
        values, policy, times = self.values(), self.policy, []
        upcoming = values.get(UPCOMING_MAINTENANCE.source)
        if not isinstance(upcoming, UpcomingMaintenance):
            return None
        notice = values.get(MAINTENANCE_EVENT.source)
        if isinstance(notice, MaintenanceEvent) and MAINTENANCE_EVENT.source not in self.lifecycle.events:
            times.append(maintenance_drain_due(notice, policy, now, upcoming))
        times.append(upcoming_drain_due(upcoming, policy))
        return min((t for t in times if t is not None and t > now), default=None)
