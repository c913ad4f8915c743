"""Which metadata values ask for a drain, and with what grace. Pure: values and the time in, a verdict out.

- maintenance-event TERMINATE_ON_HOST_MAINTENANCE: drain, maintenance grace (300 s: the Cloud TPU rule).
- MIGRATE_ON_HOST_MAINTENANCE: nothing by default (live migration keeps processes); `migrate = "drain"`.
- a well-formed value we do not know: drain by default (the safe side); `unknown_event = "ignore"`.
  (A malformed value never reaches the policy: the watcher reports it as a metadata error.)
  With `maintenance_sigterm = "before-window"`, TERMINATE waits until `maintenance_lead` before the
  window upcoming-maintenance announces, when it announces one starting within the notice GCE gives a
  GPU VM (1 h; a farther window is another maintenance): the drain, and its deadline, start then.
- preempted TRUE: drain, preemption grace (25 s: Spot VMs get about 30 s).
- upcoming-maintenance: advisory, unless `drain_before_window` (drain that long before the window starts,
  with a grace of at most that long, so the host is empty when the window opens) or `drain_when_ongoing`.

What every drain then sends is the policy's `ladder` (`watchdog.core.ladder`): SIGTERM, then SIGKILL at the
deadline, or nothing more (on_timeout = "leave").
"""

from __future__ import annotations

from dataclasses import dataclass

from watchdog.core.ladder import DEFAULT_LADDER, Ladder
from watchdog.core.lifecycle import Trigger
from watchdog.core.metadata_values import (
    MaintenanceEvent,
    MaintenanceKind,
    Preempted,
    UpcomingMaintenance,
    WatchedValue,
    format_time,
)
from watchdog.core.vocabulary import (
    DEFAULT_MAINTENANCE_GRACE,
    DEFAULT_PREEMPTION_GRACE,
    MAINTENANCE_EVENT,
    PREEMPTED,
    UPCOMING_MAINTENANCE,
)

AT_NOTICE, BEFORE_WINDOW = "at-notice", "before-window"
NOTICE_HORIZON = 3600.0  # a GPU VM's stopping notice: a window starting later is not this notice's


@dataclass(frozen=True)
class Policy:
    maintenance_grace: float = DEFAULT_MAINTENANCE_GRACE
    preemption_grace: float = DEFAULT_PREEMPTION_GRACE
    migrate_action: str = "ignore"
    unknown_event_action: str = "drain"
    drain_before_window: float | None = None
    drain_when_ongoing: bool = False
    maintenance_sigterm: str = AT_NOTICE
    maintenance_lead: float = 600.0
    ladder: Ladder = DEFAULT_LADDER  # the signals of every drain, and when they go


def trigger(
    value: WatchedValue, policy: Policy, now: float, upcoming: UpcomingMaintenance | None = None
) -> Trigger | None:
    """The policy's verdict on the current value of one key at wall time `now`; for maintenance-event,
    `upcoming` is upcoming-maintenance's value (None: unknown, or the event is already on)."""
    if isinstance(value, MaintenanceEvent):
        due = maintenance_drain_due(value, policy, now, upcoming)
        return None if due is not None and now < due else _maintenance(value, policy)
    if isinstance(value, Preempted):
        return Trigger(PREEMPTED.source, "TRUE", policy.preemption_grace) if value.preempted else None
    return _upcoming(value, policy, now)


def _maintenance(value: MaintenanceEvent, policy: Policy) -> Trigger | None:
    kind = value.kind
    drains = (
        kind is MaintenanceKind.TERMINATE_ON_HOST_MAINTENANCE
        or (kind is MaintenanceKind.MIGRATE_ON_HOST_MAINTENANCE and policy.migrate_action == "drain")
        or (kind is MaintenanceKind.UNKNOWN and policy.unknown_event_action == "drain")
    )
    return Trigger(MAINTENANCE_EVENT.source, value.raw, policy.maintenance_grace) if drains else None


def maintenance_drain_due(
    value: MaintenanceEvent, policy: Policy, now: float, upcoming: UpcomingMaintenance | None
) -> float | None:
    """When a TERMINATE notice's drain starts under `before-window` (wall time; the loop wakes then), or
    None: at the notice (the default, no window announced, or one too far off to be this notice's)."""
    notice = upcoming.notice if upcoming is not None else None
    if (
        policy.maintenance_sigterm != BEFORE_WINDOW
        or value.kind is not MaintenanceKind.TERMINATE_ON_HOST_MAINTENANCE
        or notice is None
        or notice.window_start is None
        or notice.status.upper() == "COMPLETE"
    ):
        return None
    start = notice.window_start.timestamp()
    return start - policy.maintenance_lead if start <= now + NOTICE_HORIZON else None


def _upcoming(value: UpcomingMaintenance, policy: Policy, now: float) -> Trigger | None:
    notice = value.notice
    if notice is None or notice.status.upper() == "COMPLETE":
        return None
    label = f"{notice.type or 'MAINTENANCE'} window_start={format_time(notice.window_start)}"
    if policy.drain_when_ongoing and notice.status.upper() == "ONGOING":
        return Trigger(UPCOMING_MAINTENANCE.source, label, policy.maintenance_grace)
    due = upcoming_drain_due(value, policy)
    if due is not None and policy.drain_before_window and now >= due:
        return Trigger(
            UPCOMING_MAINTENANCE.source, label, min(policy.maintenance_grace, policy.drain_before_window)
        )
    return None


def upcoming_drain_due(value: UpcomingMaintenance, policy: Policy) -> float | None:
    """When `drain_before_window` starts a drain for this notice (wall time), or None: the loop wakes then."""
    notice = value.notice
    if notice is None or notice.window_start is None or not policy.drain_before_window:
        return None
    return notice.window_start.timestamp() - policy.drain_before_window
