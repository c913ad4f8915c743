"""Each policy row: which values drain, with what grace, and what stays advisory."""

from __future__ import annotations

import datetime as dt

import pytest

from watchdog.core.lifecycle import Trigger
from watchdog.core.metadata_values import (
    MaintenanceEvent,
    MaintenanceKind,
    MaintenanceNotice,
    Preempted,
    UpcomingMaintenance,
)
from watchdog.core.policy import Policy, trigger, upcoming_drain_due

UTC = dt.timezone.utc
WINDOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def event(kind: MaintenanceKind, raw: str | None = None) -> MaintenanceEvent:
    return MaintenanceEvent(kind, raw or kind.value)


def notice(status: str = "PENDING", start: dt.datetime | None = WINDOW) -> UpcomingMaintenance:
    return UpcomingMaintenance(
        MaintenanceNotice("SCHEDULED", status, start, start and start + dt.timedelta(hours=1), None, True, ())
    )


def test_terminate_drains_with_the_maintenance_grace() -> None:
    verdict = trigger(event(MaintenanceKind.TERMINATE_ON_HOST_MAINTENANCE), Policy(), now=0)
    assert verdict == Trigger("maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE", 300.0)


def test_none_never_drains() -> None:
    assert trigger(event(MaintenanceKind.NONE), Policy(), now=0) is None


def test_migrate_is_ignored_by_default_and_can_drain() -> None:
    migrate = event(MaintenanceKind.MIGRATE_ON_HOST_MAINTENANCE)
    assert trigger(migrate, Policy(), now=0) is None
    assert trigger(migrate, Policy(migrate_action="drain"), now=0) is not None


def test_an_unknown_kind_drains_by_default_and_can_be_ignored() -> None:
    unknown = event(MaintenanceKind.UNKNOWN, "SOMETHING_NEW")
    verdict = trigger(unknown, Policy(), now=0)
    assert verdict == Trigger("maintenance-event", "SOMETHING_NEW", 300.0)
    assert trigger(unknown, Policy(unknown_event_action="ignore"), now=0) is None


def test_preemption_drains_with_the_short_grace() -> None:
    assert trigger(Preempted(True), Policy(preemption_grace=20), now=0) == Trigger("preempted", "TRUE", 20)
    assert trigger(Preempted(False), Policy(), now=0) is None


def test_upcoming_maintenance_is_advisory_by_default() -> None:
    assert trigger(notice(), Policy(), now=WINDOW.timestamp() + 10) is None
    assert trigger(notice("ONGOING"), Policy(), now=WINDOW.timestamp()) is None
    assert upcoming_drain_due(notice(), Policy()) is None


def test_drain_before_window_fires_that_long_before_the_start() -> None:
    policy = Policy(drain_before_window=600)
    due = upcoming_drain_due(notice(), policy)
    assert due == WINDOW.timestamp() - 600
    assert trigger(notice(), policy, now=due - 1) is None
    verdict = trigger(notice(), policy, now=due)
    assert verdict is not None
    assert verdict.source == "upcoming-maintenance"
    assert verdict.grace == 300.0
    # A short lead time caps the grace, so the host is empty when the window opens.
    assert trigger(notice(), Policy(drain_before_window=60), now=WINDOW.timestamp()).grace == 60  # type: ignore[union-attr]


def test_the_trigger_value_is_stable_while_time_passes() -> None:
    policy = Policy(drain_before_window=600)
    first = trigger(notice(), policy, now=WINDOW.timestamp() - 300)
    later = trigger(notice(), policy, now=WINDOW.timestamp() - 100)
    assert first == later


def test_drain_when_ongoing() -> None:
    policy = Policy(drain_when_ongoing=True)
    assert trigger(notice("PENDING"), policy, now=0) is None
    assert trigger(notice("ONGOING"), policy, now=0) is not None


@pytest.mark.parametrize("value", [UpcomingMaintenance(None), notice("COMPLETE")])
def test_nothing_scheduled_or_complete_never_drains(value: UpcomingMaintenance) -> None:
    policy = Policy(drain_before_window=10**9, drain_when_ongoing=True)
    assert trigger(value, policy, now=WINDOW.timestamp()) is None
