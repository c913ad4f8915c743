"""What the daemon shows: health, readiness, the STATUS= line and /status, from its facts. (The lifecycle
through the state file and back: tests/store/test_records.py and tests/core/test_lifecycle.py.)"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from prometheus_client import CollectorRegistry

from tests.support.daemon_harness import FAST, MAINTENANCE, DaemonHarness
from tests.support.workloads import Workloads
from watchdog.config.settings import default_config
from watchdog.core.clock import SystemClock
from watchdog.core.identity import HostIdentity
from watchdog.core.lifecycle import Lifecycle, Trigger
from watchdog.core.moments import moment_of
from watchdog.core.stop import Stop
from watchdog.daemon.view import Account, StatusView
from watchdog.fake.server import FakeMetadataServer
from watchdog.metadata.transport import MetadataTransport
from watchdog.metadata.watch import MetadataWatcher

TERMINATE = Trigger("maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE", 300.0)


class Clock:
    def __init__(self) -> None:
        self.mono, self.now = 100.0, 1.8e9

    def monotonic(self) -> float:
        return self.mono

    def wall(self) -> float:
        return self.now


def view_of(
    life: Lifecycle, clock: Clock | SystemClock, tmp_path: Path, account: Account | None = None
) -> StatusView:
    config = dataclasses.replace(default_config(), state_dir=str(tmp_path))
    with FakeMetadataServer(listen="127.0.0.1:0") as fake:
        watcher = MetadataWatcher(MetadataTransport(fake.address), lambda _: None, Stop(), timing=FAST)
    return StatusView(config, clock, watcher, life, CollectorRegistry(), account=account)


def test_readiness_and_the_status_line_follow_the_lifecycle(tmp_path: Path) -> None:
    life, clock = Lifecycle(), Clock()
    view = view_of(life, clock, tmp_path)
    assert view.readiness() == (True, "ready")
    assert view.summary() == "idle: watching the metadata server"
    actions = life.observe("maintenance-event", TERMINATE, clock.now)
    assert view.readiness() == (True, "ready")  # shown as told: the loop tells once it has acted
    for action in actions:
        view.told(moment_of(action, 1.8e9), life)
    clock.now += 100
    ready, why = view.readiness()
    assert not ready
    assert "draining for maintenance-event=TERMINATE_ON_HOST_MAINTENANCE" in why
    assert view.summary().startswith("draining: maintenance-event=TERMINATE_ON_HOST_MAINTENANCE; 200 s")
    view.state_error = "/var/lib/tpu-watchdog/state.json: No space left on device"
    assert view.summary().endswith("; STATE NOT PERSISTED")


def test_liveness_fails_only_when_the_loop_stops_ticking(tmp_path: Path) -> None:
    clock = Clock()
    view = view_of(Lifecycle(), clock, tmp_path)
    assert view.liveness() == (True, "ok")
    clock.mono += 31
    live, why = view.liveness()
    assert not live
    assert "has not ticked for 31 s" in why
    view.loop_ticked()
    assert view.liveness() == (True, "ok")


def test_status_names_the_drain_its_deadline_and_the_state_file(tmp_path: Path) -> None:
    life, clock = Lifecycle(), Clock()
    view = view_of(life, clock, tmp_path)
    for action in life.observe("maintenance-event", TERMINATE, clock.now):
        view.told(moment_of(action, 1.8e9), life)
    status = view.status()
    assert status["state"] == "draining"
    assert status["drain"]["deadline"] == clock.now + 300
    assert status["drain"]["time_left"] == 300
    assert status["state_file"] == {"persisted": True, "error": None}
    assert [e["source"] for e in status["events"]] == ["maintenance-event"]


def test_last_drain_is_the_history_entry_of_the_drain_that_ended_in_this_run(
    fake: FakeMetadataServer, workloads: Workloads, state_dir: Path
) -> None:
    """One shape: `last_drain` is the entry `recent_drains` (and the history) has, not another rendering of
    the record; null until a drain ends in this run, a restart included."""
    workloads.start("handled")
    with DaemonHarness(state_dir, fake, workloads) as harness:
        assert harness.daemon.view.status()["last_drain"] is None  # no drain has ended yet
        fake.set(MAINTENANCE, "TERMINATE_ON_HOST_MAINTENANCE")
        harness.wait_state("drained")
        status = harness.daemon.view.status()
        [entry] = status["recent_drains"]
        last = status["last_drain"]
        assert last == entry
        [proc] = last["processes"]
        assert (last["outcome"], proc["signals"], proc["end"]) == ("exited", ["SIGTERM"], "exited")
    with DaemonHarness(state_dir, fake, workloads) as again:  # the event is still on: nothing to drain
        status = again.daemon.view.status()
        assert (status["last_drain"], [e["id"] for e in status["recent_drains"]]) == (None, [entry["id"]])


def test_the_host_is_known_fields_in_status_and_every_field_as_text_for_notices(tmp_path: Path) -> None:
    view = view_of(Lifecycle(), Clock(), tmp_path)
    assert view.status()["host"] == {}
    assert set(view.host.values()) == {""}
    view.identity = HostIdentity(instance_id="42", tpu_node="train-a", slice_hosts=16)
    assert view.status()["host"] == {"instance_id": "42", "tpu_node": "train-a", "slice_hosts": 16}
    assert view.host["tpu_node"] == "train-a"
    assert view.host["slice_hosts"] == "16"
    assert view.host["multislice_coordinator"] == ""


def test_health_waits_for_every_keys_first_good_answer(tmp_path: Path) -> None:
    """At start-up nothing has answered yet: the daemon cannot tell whether an event is on, so it is not
    healthy (the README's wording), even inside the tolerance."""
    clock = Clock()
    view = view_of(Lifecycle(), clock, tmp_path)
    clock.now += 2
    healthy, why = view.health()
    assert not healthy
    assert why.startswith("unhealthy: no good answer yet from instance/maintenance-event since start 2 s")
