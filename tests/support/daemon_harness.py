"""A real daemon in a thread: real fake metadata server over loopback HTTP, real watches, a real state file,
real children holding a real device node, real signals. Timings are shortened (hanging GETs of 2 s, fast
backoff); nothing else is replaced. The scanner is narrowed to the test's own processes (see OwnScanner)."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

from tests.support.waiting import wait_for
from tests.support.workloads import TEST_ALLOW, OwnScanner, Workloads
from watchdog.config.settings import Config, default_config
from watchdog.core.stop import Stop
from watchdog.daemon.compose import Wiring, build_daemon
from watchdog.daemon.newcomers import CONFIRM_WAIT
from watchdog.fake.server import FakeMetadataServer
from watchdog.metadata.backoff import WatchBackoff
from watchdog.metadata.watch import WatchMode, WatchTiming
from watchdog.store.statefile import StateStore
from watchdog.surface.metrics import STATES
from watchdog.surface.notify import Notifier

MAINTENANCE = "instance/maintenance-event"
PREEMPTED = "instance/preempted"
UPCOMING = "instance/upcoming-maintenance"
FAST = WatchTiming(
    read_margin_sec=2.0,
    request_timeout_sec=2.0,
    spin_guard_sec=0.05,
    poll_interval_sec=1.0,
    unsupported_recheck_sec=0.5,
)


def harness_config(state_dir: Path, workloads: Workloads, **overrides: Any) -> Config:
    base = dataclasses.replace(
        default_config(),
        devices=(str(workloads.device),),
        allow_numbers=(TEST_ALLOW,),  # make_device's node: /dev/full's numbers, class mem
        state_dir=str(state_dir),
        maintenance_grace=30.0,
        preemption_grace=2.0,
    )
    return dataclasses.replace(base, **overrides)


class DaemonHarness:
    def __init__(
        self,
        state_dir: Path,
        fake: FakeMetadataServer,
        workloads: Workloads,
        notifier: Notifier | None = None,
        store: StateStore | None = None,
        scanner: Any = None,
        confirm_wait: float = CONFIRM_WAIT,
        wait_for_answers: bool = True,
        host_info: bool = False,
        wiring: dict[str, Any] | None = None,
        **overrides: Any,
    ) -> None:
        self.wait_for_answers = wait_for_answers
        self.config = harness_config(state_dir, workloads, **overrides)
        self.fake = fake
        self.stop = Stop()
        wiring_ = Wiring(
            metadata_host=fake.address,
            timeout_sec=2,
            timing=FAST,
            backoff=lambda: WatchBackoff.uniform(initial=0.05, cap=0.2),
            scanner=scanner or OwnScanner(workloads),
            store=store,
            notifier=notifier or Notifier(environ={}),
            host_info=host_info,
            confirm_wait=confirm_wait,
            webhook_backoff=0.05,
        )
        self.built = build_daemon(self.config, self.stop, dataclasses.replace(wiring_, **(wiring or {})))
        self.daemon, self.transport = self.built.daemon, self.built.transport
        self.metrics, self.store = self.built.metrics, self.built.store
        self.thread = threading.Thread(target=self.daemon.run, name="daemon under test", daemon=True)

    def __enter__(self) -> DaemonHarness:
        self.thread.start()
        if self.wait_for_answers:
            wait_for(self.every_key_answered, what="the first value of every watched key (or its 404)")
        return self

    def every_key_answered(self) -> bool:
        unsupported = sum(s.mode is WatchMode.UNSUPPORTED for s in self.daemon.watcher.statuses())
        return len(self.daemon.view.values) + unsupported == len(self.daemon.watcher.watches)

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        self.transport.close()
        assert not self.thread.is_alive(), "the daemon did not stop within 10 s"

    @property
    def state(self) -> str:
        """The daemon's state as a scrape sees it (`tpu_watchdog_state`): set as the loop tells each moment,
        after the history has counted a drain's end, so a test that waits for a state sees its count."""
        return next((s for s in STATES if self.metric("tpu_watchdog_state", state=s) == 1), "")

    def metric(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    def wait_state(self, state: str, timeout: float = 20.0) -> None:
        wait_for(
            lambda: self.state == state, timeout=timeout, what=f"daemon state {state} (now {self.state})"
        )

    def wait_metric(self, name: str, value: float, timeout: float = 20.0, **labels: str) -> None:
        wait_for(
            lambda: self.metric(name, **labels) >= value,
            timeout=timeout,
            what=f"{name}{labels} >= {value} (now {self.metric(name, **labels)})",
        )
