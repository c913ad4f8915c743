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


TERMINATE = event(MaintenanceKind.TERMINATE_ON_HOST_MAINTENANCE)
BEFORE_WINDOW = Policy(maintenance_sigterm="before-window", maintenance_lead=600)


def test_a_terminate_notice_drains_at_the_notice_by_default_window_or_not() -> None:
    now = WINDOW.timestamp() - 3000
    assert trigger(TERMINATE, Policy(), now, upcoming=notice()) is not None


def test_before_window_puts_the_sigterm_off_until_the_lead_before_the_window() -> None:
    """A GPU VM's hour of notice: the job trains on until 600 s before the window; the grace (the
    deadline) counts from then."""
    due = WINDOW.timestamp() - 600
    assert trigger(TERMINATE, BEFORE_WINDOW, due - 2400, upcoming=notice()) is None
    assert trigger(TERMINATE, BEFORE_WINDOW, due - 1, upcoming=notice()) is None
    verdict = trigger(TERMINATE, BEFORE_WINDOW, due, upcoming=notice())
    assert verdict == Trigger("maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE", 300.0)


@pytest.mark.parametrize(
    ("upcoming", "why"),
    [
        (None, "upcoming-maintenance unknown"),
        (UpcomingMaintenance(None), "no notification"),
        (notice(start=None), "a notice without a window start"),
        (notice("COMPLETE"), "a completed maintenance"),
        (notice(start=WINDOW + dt.timedelta(hours=3)), "a window beyond the hour of notice: another one"),
    ],
)
def test_before_window_drains_at_the_notice_without_a_window_to_wait_for(
    upcoming: UpcomingMaintenance | None, why: str
) -> None:
    assert trigger(TERMINATE, BEFORE_WINDOW, WINDOW.timestamp() - 3000, upcoming=upcoming) is not None, why


def test_before_window_waits_for_terminate_only() -> None:
    preempted = trigger(Preempted(True), BEFORE_WINDOW, WINDOW.timestamp() - 3000)
    assert preempted is not None
    migrate = event(MaintenanceKind.MIGRATE_ON_HOST_MAINTENANCE)
    policy = Policy(maintenance_sigterm="before-window", migrate_action="drain")
    assert trigger(migrate, policy, WINDOW.timestamp() - 3000, upcoming=notice()) is not None
