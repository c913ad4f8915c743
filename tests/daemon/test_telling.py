"""Outputs subscribe: every moment reaches every subscriber in order, and one that fails is counted and
stops neither the next subscriber nor the caller."""

from __future__ import annotations

import math

import pytest

from watchdog.core.drain_record import DrainRecord, SignalResult
from watchdog.core.lifecycle import (
    ActiveDrain,
    CancelDrain,
    Event,
    EventStarted,
    Lifecycle,
    StartDrain,
    Trigger,
)
from watchdog.core.moments import DrainEnded, DrainStarted, Moment, ProcessSignalled, moment_of
from watchdog.core.process import ProcessIdentity
from watchdog.core.vocabulary import Outcome, Output
from watchdog.daemon.outputs import Outputs
from watchdog.daemon.telling import LifecycleGauges, SignalCounter, SiteHooks, Telling
from watchdog.surface.hooks import HookContext, HookRunner
from watchdog.surface.metrics import Metrics

EVENT = Event("e1", "preempted", "TRUE", 1.8e9, deadline=1.8e9 + 25)


class Heard:
    def __init__(self, output: Output, heard: list[tuple[str, Moment]], fails: bool = False) -> None:
        self.output, self.heard, self.fails = output, heard, fails

    def told(self, moment: Moment, lifecycle: Lifecycle) -> None:
        self.heard.append((self.output.value, moment))
        if self.fails:
            raise OSError("the journal is gone")


def errors(metrics: Metrics, output: Output) -> float | None:
    return metrics.registry.get_sample_value("tpu_watchdog_output_errors_total", {"output": output.value})


def test_each_moment_reaches_every_subscriber_in_order_past_one_that_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics, heard = Metrics(), []
    subscribers = [
        Heard(Output.METRICS, heard),
        Heard(Output.LOG, heard, fails=True),
        Heard(Output.HOOKS, heard),
    ]
    telling = Telling(Outputs(metrics), Lifecycle(), subscribers)
    moments: list[Moment] = [EventStarted(EVENT), CancelDrain("the event cleared")]
    for moment in moments:
        telling.tell(moment)  # never raises
    assert heard == [(o, m) for m in moments for o in ("metrics", "log", "hooks")]
    assert errors(metrics, Output.LOG) == 2
    assert errors(metrics, Output.HOOKS) == 0


def test_a_started_drain_is_told_as_its_cause_and_deadline() -> None:
    start = StartDrain(EVENT, started=1.8e9, deadline=1.8e9 + 25)
    assert moment_of(start, 1.8e9 + 1) == DrainStarted("preempted", 1.8e9 + 25, 1.8e9 + 1)
    assert moment_of(CancelDrain("x"), 1.8e9) == CancelDrain("x")  # the lifecycle's other actions, as is


def test_the_state_and_deadline_gauges_follow_the_lifecycle_after_each_moment() -> None:
    metrics, life = Metrics(), Lifecycle()
    gauges = LifecycleGauges(metrics)

    def shown() -> tuple[float | None, float | None]:
        deadline = metrics.registry.get_sample_value("tpu_watchdog_drain_deadline_timestamp_seconds")
        return metrics.registry.get_sample_value("tpu_watchdog_state", {"state": "draining"}), deadline

    for action in life.observe("preempted", Trigger("preempted", "TRUE", 30.0), 1.8e9):
        gauges.told(moment_of(action, 1.8e9), life)
    assert shown() == (1.0, 1.8e9 + 30)
    for action in life.observe("preempted", Trigger("preempted", "TRUE", 10.0), 1.8e9 + 5):
        gauges.told(moment_of(action, 1.8e9), life)
    assert shown() == (1.0, 1.8e9 + 15)  # moved
    record = DrainRecord(0.0, 1.8e9, 15.0, "kill", dry_run=False, outcome=Outcome.EXITED)
    ended = life.drain
    life.drain_finished("exited", 1.8e9 + 6)
    gauges.told(DrainEnded(record, EVENT, ended, life.state.value, None, {}), life)
    state, deadline = shown()
    assert state == 0.0
    assert deadline is not None
    assert math.isnan(deadline)  # no drain
    assert metrics.registry.get_sample_value("tpu_watchdog_state", {"state": "drained"}) == 1.0


class Hooks(HookRunner):
    def __init__(self) -> None:
        super().__init__({}, 1.0)
        self.ran: list[tuple[str, HookContext]] = []

    def run_hook(self, hook: str, context: HookContext) -> None:  # type: ignore[override]
        self.ran.append((hook, context))


def test_the_site_hooks_get_the_event_and_at_a_drains_end_its_outcome() -> None:
    hooks = Hooks()
    site = SiteHooks(hooks, dry_run=True)
    site.told(EventStarted(EVENT), Lifecycle())
    record = DrainRecord(0.0, 1.8e9, 25.0, "kill", dry_run=True, outcome=Outcome.EXITED)
    drain = ActiveDrain([EVENT.event_id], 1.8e9, 1.8e9 + 25)
    site.told(DrainEnded(record, EVENT, drain, "drained", None, {}), Lifecycle())
    site.told(DrainStarted("preempted", 1.0, 0.5), Lifecycle())  # no hook for a drain's start
    assert [(name, c.event_source, c.outcome, c.dry_run) for name, c in hooks.ran] == [
        ("on_event_start", "preempted", "", True),
        ("on_drain_end", "preempted", "exited", True),
    ]


def test_each_signal_sent_is_counted_and_a_dry_runs_is_not() -> None:
    metrics = Metrics()
    counter = SignalCounter(metrics)
    who = ProcessIdentity(4242, 7)
    for result, dry_run in [
        (SignalResult.SENT, False),
        (SignalResult.GONE, False),
        (SignalResult.SENT, True),
    ]:
        counter.told(
            ProcessSignalled(who, "train", 15, result, "d1", ("e1",), False, None, dry_run), Lifecycle()
        )
    sent = metrics.registry.get_sample_value("tpu_watchdog_signals_sent_total", {"signal": "SIGTERM"})
    assert sent == 1
