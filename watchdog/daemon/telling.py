"""Outputs subscribe: the loop emits each moment of the story (`core/moments.py`) once, and every output
that says it subscribes here. Signal first, then tell: a moment is emitted after the loop has acted and
queued the state file's write, and each subscriber runs inside its own guard (`Outputs`), so one that
fails neither stops the next nor reaches the loop; none of them waits (the history, hooks and webhooks
write or run on threads of their own).

The subscribers, in the order they are told: the history and its drain counters (`daemon/recorder.py`),
the state and deadline gauges and the signal counter (metrics), /status (`daemon/view.py`) and systemd's
STATUS= line (`daemon/systemd.py`), the log lines (`daemon/announce.py`), the webhook notices
(`daemon/notices.py`) and the site hooks. Only the loop tells, and it runs the drain too: the drain's moments
(holders found, each signal) are what the runner's calls answer (`daemon/runner.py`), so every subscriber
is called from one thread, in one order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from watchdog.core.drain_record import SignalResult
from watchdog.core.ladder import signal_name
from watchdog.core.lifecycle import Event, EventCleared, EventStarted, Lifecycle
from watchdog.core.moments import DrainEnded, HoldersFound, Moment, ProcessSignalled
from watchdog.core.vocabulary import Outcome, Output
from watchdog.daemon.outputs import Outputs
from watchdog.surface.hooks import HookContext, HookRunner
from watchdog.surface.metrics import Metrics


class Subscriber(Protocol):
    """One output of the daemon: what it says of each moment (nothing, for most)."""

    output: Output  # what its failures are counted as

    def told(self, moment: Moment, lifecycle: Lifecycle) -> None:
        """`lifecycle`: as it is after the moment (its drain, the drain's event): read, never changed."""


class Telling:
    """Hands each moment to every subscriber, each guarded on its own."""

    def __init__(self, outputs: Outputs, lifecycle: Lifecycle, subscribers: Sequence[Subscriber]) -> None:
        self.outputs, self.lifecycle, self.subscribers = outputs, lifecycle, tuple(subscribers)

    def tell(self, moment: Moment) -> None:
        for subscriber in self.subscribers:
            with self.outputs.guarded(subscriber.output):
                subscriber.told(moment, self.lifecycle)


class LifecycleGauges:
    """`tpu_watchdog_state{state}` and `tpu_watchdog_drain_deadline_timestamp_seconds` (NaN: no drain): the
    lifecycle as it is after each moment the loop tells. Told after the history, so a scrape that sees a
    drain's end in the state sees it counted too. The drain's own moments change neither: the lifecycle
    is the loop's."""

    output = Output.METRICS

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def told(self, moment: Moment, lifecycle: Lifecycle) -> None:
        if isinstance(moment, (HoldersFound, ProcessSignalled)):
            return
        self.metrics.set_state(lifecycle.state.value)
        self.metrics.set_deadline(lifecycle.drain.deadline if lifecycle.drain is not None else None)


class SignalCounter:
    """`tpu_watchdog_signals_sent_total{signal}`: each signal sent (a dry run sends nothing, so counts
    nothing)."""

    output = Output.METRICS

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def told(self, moment: Moment, lifecycle: Lifecycle) -> None:
        if isinstance(moment, ProcessSignalled) and moment.result is SignalResult.SENT and not moment.dry_run:
            self.metrics.signals_sent.labels(signal_name(moment.signum)).inc()


class SiteHooks:
    """The site's hooks: on_event_start, on_event_clear and on_drain_end, each with the event, the drain's
    deadline (None: no drain) and, at a drain's end, its outcome."""

    output = Output.HOOKS

    def __init__(self, hooks: HookRunner, dry_run: bool) -> None:
        self.hooks, self.dry_run = hooks, dry_run

    def told(self, moment: Moment, lifecycle: Lifecycle) -> None:
        deadline = lifecycle.drain.deadline if lifecycle.drain else None
        if isinstance(moment, EventStarted):
            self._run("on_event_start", moment.event, deadline)
        elif isinstance(moment, EventCleared):
            self._run("on_event_clear", moment.event, deadline)
        elif isinstance(moment, DrainEnded):
            outcome = moment.record.outcome or Outcome.INTERRUPTED
            self._run("on_drain_end", moment.event, moment.deadline, outcome.value)

    def _run(self, name: str, event: Event | None, deadline: float | None, outcome: str = "") -> None:
        source, value, event_id = (event.source, event.value, event.event_id) if event else ("", "", "")
        self.hooks.run_hook(name, HookContext(source, value, event_id, outcome, deadline, self.dry_run))
