"""Exactly one daemon per host: a second `tpu-watchdog run` on the same state directory refuses (exit 75,
naming the first one's pid) or, if the first stops within its lock wait, takes over. Two daemons never drain
at once. Real processes; no event is ever set, so nothing is ever signalled here."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.support.ports import reserved_port
from tests.support.waiting import wait_for
from tests.support.workloads import make_device
from watchdog.fake.server import FakeMetadataServer

EXIT_LOCKED = 75


def start(
    tmp_path: Path, fake: FakeMetadataServer, name: str, lock_wait: float, port: int
) -> subprocess.Popen[str]:
    (tmp_path / "empty.toml").write_text("")
    command = [
        sys.executable, "-m", "watchdog", "run", "--config", str(tmp_path / "empty.toml"),
        "--metadata-host", fake.address, "--device", str(tmp_path / "accel0"),
        "--state-dir", str(tmp_path / "state"), "--listen", f"127.0.0.1:{port}",
        "--metadata-timeout-sec", "2", "--lock-wait", str(lock_wait),
    ]  # fmt: skip
    log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 - the child holds it; closed with the process
    process = subprocess.Popen(command, stderr=log, text=True)
    log.close()
    return process


def live(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def test_a_second_daemon_refuses_naming_the_first_and_takes_over_once_it_stops(
    tmp_path: Path, fake: FakeMetadataServer
) -> None:
    make_device(tmp_path)
    with reserved_port() as first_port, reserved_port() as refused_port, reserved_port() as waiting_port:
        one_after_another(tmp_path, fake, first_port, refused_port, waiting_port)


def one_after_another(
    tmp_path: Path, fake: FakeMetadataServer, first_port: int, refused_port: int, waiting_port: int
) -> None:
    first = start(tmp_path, fake, "first", lock_wait=0, port=first_port)
    waiting: subprocess.Popen[str] | None = None
    try:
        wait_for(lambda: live(first_port), timeout=30, what="the first daemon to serve /livez")
        refused = start(tmp_path, fake, "refused", lock_wait=0.5, port=refused_port)
        assert refused.wait(timeout=30) == EXIT_LOCKED
        said = (tmp_path / "refused.log").read_text()
        assert f"another tpu-watchdog (pid {first.pid}) holds the state dir" in said, said
        assert "stop the other one first" in said

        waiting = start(tmp_path, fake, "waiting", lock_wait=60, port=waiting_port)
        wait_for(
            lambda: "waiting up to 60 s" in (tmp_path / "waiting.log").read_text(),
            timeout=30,
            what="the second daemon to wait for the lock",
        )
        assert not live(waiting_port)  # it serves nothing (drains nothing) while the first one runs
        first.terminate()
        assert first.wait(timeout=20) == 0
        wait_for(lambda: live(waiting_port), timeout=30, what="the second daemon to take over")
        assert waiting.poll() is None
    finally:
        for process in (first, waiting):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(timeout=20)
