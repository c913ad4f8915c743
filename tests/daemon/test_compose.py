"""The composition root: the daemon `run`, the demo and the tests all build is wired from the configuration,
with only what a `Wiring` names replaced."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

from tests.support.daemon_harness import FAST
from tests.support.waiting import wait_for
from watchdog.config.settings import default_config
from watchdog.core.stop import Stop
from watchdog.daemon.compose import Wiring, build_daemon
from watchdog.fake.server import FakeMetadataServer
from watchdog.host.holders import HolderScanner


def test_production_wiring_comes_from_the_configuration(tmp_path: Path) -> None:
    config = dataclasses.replace(
        default_config(), devices=(str(tmp_path / "accel*"),), state_dir=str(tmp_path / "state"),
        metadata_host="127.0.0.1:1",
    )  # fmt: skip
    built = build_daemon(config, Stop())
    try:
        daemon = built.daemon
        assert built.metadata_host == "127.0.0.1:1"  # the configured server, not GCE's
        assert built.store.dir == str(tmp_path / "state")
        assert isinstance(
            daemon.runner.scanner, HolderScanner
        )  # every process of this namespace, not a narrowed one
        assert daemon.notice_timing.policy.maintenance_grace == config.maintenance_grace
        assert {w.key for w in daemon.watcher.watches} == {
            "instance/maintenance-event", "instance/preempted", "instance/upcoming-maintenance",
        }  # fmt: skip
    finally:
        built.close()


def test_a_wiring_replaces_only_what_it_names(tmp_path: Path) -> None:
    config = dataclasses.replace(default_config(), state_dir=str(tmp_path / "state"))
    stop = Stop()
    with FakeMetadataServer(listen="127.0.0.1:0") as fake:
        scanner = HolderScanner(patterns=[str(tmp_path / "nothing")])
        built = build_daemon(
            config, stop, Wiring(metadata_host=fake.address, timeout_sec=2, timing=FAST, scanner=scanner,
                                 host_info=False, confirm_wait=0.5),
        )  # fmt: skip
        runner = threading.Thread(target=built.daemon.run)
        runner.start()
        try:
            wait_for(
                lambda: any("maintenance-event" in r.path for r in fake.requests()),
                what="the daemon to watch the fake, not GCE",
            )
            assert built.metadata_host == fake.address
            assert built.daemon.runner.scanner is scanner
            assert built.daemon.newcomers.confirm_wait == 0.5
        finally:
            stop.set()
            runner.join(timeout=10)
            built.close()
        assert not runner.is_alive()
