"""Who may be signalled that nobody signalled before, and when a restored event counts as confirmed."""

from __future__ import annotations

import logging

import pytest

from watchdog.core.lifecycle import Lifecycle, Trigger
from watchdog.daemon.newcomers import Newcomers
from watchdog.daemon.outputs import Outputs
from watchdog.surface.metrics import Metrics

OUTPUTS = Outputs(Metrics())
ASK = "SIGTERM"  # the default ladder's asking signal

TERMINATE = Trigger("maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE", 300.0)


def restored_lifecycle() -> Lifecycle:
    life = Lifecycle()
    life.observe("maintenance-event", TERMINATE, 1000.0)
    life.drain_finished("exited", 1001.0)
    life.events["maintenance-event"].confirmed = False  # as loaded from the state file
    return life


def test_an_unconfirmed_event_waits_then_carries_on_until_its_deadline_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    life = restored_lifecycle()
    newcomers = Newcomers(life, started_wall=1100.0, confirm_wait=10.0, outputs=OUTPUTS, ask=ASK)
    assert not newcomers.admitted(1105.0)
    assert newcomers.admitted(1110.0)  # unheard for the whole wait: the maintenance is still coming
    assert newcomers.gave_up_waiting
    assert not newcomers.admitted(1300.0)  # past the deadline, unheard: nobody new
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1
    assert "taking it as still on until its deadline" in said[0]


def test_a_confirmation_admits_at_once() -> None:
    life = restored_lifecycle()
    newcomers = Newcomers(life, started_wall=1100.0, confirm_wait=10.0, outputs=OUTPUTS, ask=ASK)
    life.observe("maintenance-event", TERMINATE, 1100.5)  # the first answer says it is still on
    assert newcomers.admitted(1100.5)
    assert not newcomers.gave_up_waiting


def test_nothing_on_file_admits_from_the_start() -> None:
    assert Newcomers(Lifecycle(), started_wall=1100.0, outputs=OUTPUTS, ask=ASK).admitted(1100.0)


def test_a_drain_with_one_confirmed_event_admits_newcomers() -> None:
    life = restored_lifecycle()
    life.late_arrivals(1100.0)  # a drain of the restored, unconfirmed event
    life.observe("preempted", Trigger("preempted", "TRUE", 30.0), 1100.2)  # a new event joins it
    assert Newcomers(life, started_wall=1100.0, confirm_wait=10.0, outputs=OUTPUTS, ask=ASK).admitted(1100.3)
