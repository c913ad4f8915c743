"""Jobs that will lose their progress, under the multi-host harness (watchdog/fake/hosts.py): what the
daemon does and what its drain record says (tests/support/lossy_trainer.py: the example trainer with one
mistake each). SIGTERM at its default kills the process before any save; a Python SIGTERM handler installed
after jax.distributed.initialize silently disables JAX's notifier, so the process never exits on its own
and is SIGKILLed at the deadline.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.multihost import (
    announce,
    finished_drains,
    history,
    needs_hosts,
    readiness,
    started,
    state_dir,
)
from tests.support.waiting import wait_for
from watchdog.exitcodes import EXIT_LOST
from watchdog.fake.hosts import Cluster, Job, SimulatedHost

LOSSY = Path(__file__).resolve().parents[1] / "support" / "lossy_trainer.py"
SAVE_INTERVAL = 1000
GRACE = 3.0  # s: short, so the job that never exits is SIGKILLed soon
CONFIG = f"[drain]\nmaintenance_grace = {GRACE}\n"

pytestmark = [pytest.mark.slow, needs_hosts]


def lossy(mistake: str) -> Job:
    return Job(hosts=1, save_interval=SAVE_INTERVAL, trainer=LOSSY, extra=("--mistake", mistake))


def last_drain(host: SimulatedHost, timeout: float) -> dict[str, Any]:
    status = wait_for(lambda: (s := host.status()) and s["last_drain"] and s, timeout, what="the drain's end")
    record: dict[str, Any] = status["last_drain"]
    return record


def nothing_saved_for_the_event(hosts: Cluster) -> None:
    """The only checkpoints are the schedule's (and Orbax's first): none at the step the event came."""
    steps = [int(p.name) for p in hosts.checkpoints.iterdir() if p.name.isdigit()]
    assert all(step == 1 or step % SAVE_INTERVAL == 0 for step in steps), steps
    assert hosts.reports() == [None]  # it never got to say how it ended


def test_a_job_without_distributed_initialize_dies_of_sigterm_without_saving(tmp_path: Path) -> None:
    with started(tmp_path, lossy("no-initialize"), CONFIG) as hosts:
        host = hosts.hosts[0]
        assert readiness(hosts, host) == (EXIT_LOST, ["default"])  # flagged before the event
        status = host.status()
        assert status is not None
        assert [h["sigterm"] for h in status["holders"]] == ["default"]  # the daemon's view: default too
        assert 'tpu_watchdog_device_holders_by_sigterm{disposition="default"} 1.0' in host.metrics()
        announce(hosts, 0, "maintenance")
        [end] = hosts.wait_exited(30)
        assert end.get("signal") == 15, (end, hosts.logs())  # SIGTERM's default action
        record = last_drain(hosts.hosts[0], 30)
        assert record["outcome"] == "exited", record
        [process] = record["processes"]
        assert process["end"] == "exited", process  # not killed
        # How it died is the daemon's to know only while it is a zombie: its parent (here the host's init,
        # on a TPU VM the shell or launcher that started it) mostly reaps it first.
        if process["exit_signal"] == "SIGTERM":  # its lines follow /status by a history write
            said = "SIGTERM's default action: it had no handler, so it saved no checkpoint"
            wait_for(lambda: said in host.daemon_log.read_text(), 30, interval=0.1, what="the drain's lines")
        else:
            assert (process["exit_status"], process["exit_signal"]) == (None, None), process
        nothing_saved_for_the_event(hosts)
        # The history says how it died either way: its disposition was known before the signal.
        [entry], words = finished_drains(hosts, host, 30)
        [process] = entry["processes"]
        assert (process["sigterm"], process["end"], process["signals"]) == ("default", "exited", ["SIGTERM"])
        assert entry["host"].get("tpu_node") == "fake-slice-0", entry["host"]  # the host, as webhooks name it
        [line] = [line for line in words.splitlines() if line.lstrip().startswith(f"{process['pid']} ")]
        assert "died of SIGTERM's default action" in line, words
        assert "saved no checkpoint" in line, words
        inferred = "inferred: its SIGTERM was at the default (no handler) when it was seen before the signal"
        unknown = process["exit_status"] is None and process["exit_signal"] is None  # reaped by its parent
        assert (inferred in line) is unknown, words
        assert "1 died of SIGTERM's default action (no checkpoint)" in words, words


def test_a_python_handler_after_initialize_never_exits_and_is_killed_at_the_deadline(tmp_path: Path) -> None:
    with started(tmp_path, lossy("handler-after-initialize"), CONFIG) as hosts:
        assert readiness(hosts, hosts.hosts[0]) == (0, ["caught"])  # it looks ready: only a drill tells
        announce(hosts, 0, "maintenance")
        [end] = hosts.wait_exited(GRACE + 30)
        assert end.get("signal") == 9, (end, hosts.logs())  # SIGKILL at the deadline
        record = last_drain(hosts.hosts[0], 30)
        assert record["outcome"] == "timed_out", record
        [process] = record["processes"]
        assert process["signals"] == ["SIGTERM", "SIGKILL"], process
        assert process["end"] == "killed", process
        assert "SIGTERM: will save later" in hosts.hosts[0].job_log.read_text()  # its handler ran, uselessly
        nothing_saved_for_the_event(hosts)
        [entry], words = finished_drains(hosts, hosts.hosts[0], 30)
        never_left_on_its_own(entry, words)


def test_a_drill_shows_the_python_handler_job_never_leaves_on_its_own(tmp_path: Path) -> None:
    """It looks ready from outside (it catches SIGTERM); only a drill on its host shows it is not."""
    with started(tmp_path, lossy("handler-after-initialize"), CONFIG) as hosts:
        host = hosts.hosts[0]
        drill = [sys.executable, "-m", "watchdog", "drill", "--device", str(host.device),
                 "--grace", str(GRACE), "--state-dir", str(state_dir(host))]  # fmt: skip
        done = host.inside(drill, 60, hosts.env)  # while the daemon runs, with its own history open
        assert done.returncode == EXIT_LOST, done.stdout + done.stderr
        assert "NEEDED SIGKILL: still holding the TPU at the deadline; its progress is lost" in done.stdout
        [end] = hosts.wait_exited(10)
        assert end.get("signal") == 9, end
        [entry], words = history(hosts, host)  # the drill's drain: the daemon had none
        assert f"recorded in the drain history as {entry['id']}" in done.stdout
        assert (entry["event"], entry["dry_run"]) == ({"key": "drill", "value": "rehearsal"}, False)
        assert f"● drain {entry['id']}: timed_out  drill = rehearsal" in words, words
        never_left_on_its_own(entry, words)


def never_left_on_its_own(entry: dict[str, Any], words: str) -> None:
    """The history's account of the job whose Python handler disabled JAX's: SIGTERM caught, to no end."""
    assert entry["outcome"] == "timed_out", entry
    [process] = entry["processes"]
    assert (process["signals"], process["end"], process["sigterm"]) == (["SIGTERM", "SIGKILL"], "killed",
                                                                        "caught"), process  # fmt: skip
    [line] = [line for line in words.splitlines() if line.lstrip().startswith(f"{process['pid']} ")]
    assert "killed" in line, words
    assert "it never left on its own (progress since its last checkpoint lost)" in line, words
