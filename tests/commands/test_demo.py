"""`tpu-watchdog demo`: its one flag, the environment its job is started with, and one real run end to end
(fake metadata server, a job on a device node, the daemon draining it) that must end in a checkpoint saved
on SIGTERM."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import watchdog
from tests.support.multihost import needs_hosts
from watchdog.commands import demo
from watchdog.exitcodes import EXIT_DEMO_NEEDS

REPO = Path(__file__).resolve().parents[2]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tpu-watchdog demo")
    demo.add_arguments(parser)
    return parser.parse_args(argv)


def test_keep_and_multihost_are_its_only_flags() -> None:
    assert (parse().keep, parse().multihost) == (False, False)
    assert parse("--keep").keep is True
    assert parse("--multihost").multihost is True
    for bad in (["--keep=yes"], ["extra"], ["--grace", "5"]):
        with pytest.raises(SystemExit) as raised:
            parse(*bad)
        assert raised.value.code == 2


def test_the_job_imports_this_watchdog_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """The .deb keeps the package where only its launcher looks: the job's PYTHONPATH must lead there."""
    monkeypatch.setenv("PYTHONPATH", "/opt/a:/opt/b")
    home = str(Path(watchdog.__file__).resolve().parents[1])
    assert demo._importing_watchdog()["PYTHONPATH"].split(":") == [home, "/opt/a", "/opt/b"]
    monkeypatch.delenv("PYTHONPATH")
    assert demo._importing_watchdog()["PYTHONPATH"] == home


@pytest.mark.slow
def test_a_real_run_drains_the_job_and_keeps_its_checkpoint() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "watchdog", "demo", "--keep"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    kept = re.search(r"^kept (\S+)$", done.stdout, re.M)
    try:
        assert done.returncode == 0, done.stdout + done.stderr
        assert re.search(r"^== done in [\d.]+ s: the job exited 0 with a checkpoint saved on SIGTERM$",
                         done.stdout, re.M)  # fmt: skip
        assert "SIGTERM to pid" in done.stdout
        assert 'tpu_watchdog_drains_total{outcome="exited"} 1.0' in done.stdout
        assert kept is not None
        saved = [
            json.loads(p.read_text()) for p in sorted(Path(kept[1]).glob("checkpoints/checkpoint-*.json"))
        ]
        assert saved[-1]["reason"] == "SIGTERM"
        assert any(Path(kept[1], "state").iterdir())  # the daemon's state file, written before the signal
    finally:
        if kept is not None:
            shutil.rmtree(kept[1], ignore_errors=True)


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="needs the system's python3")
def test_without_jax_the_multihost_demo_says_how_to_install_it() -> None:
    """The system's python3 has the daemon's dependencies (the .deb's), not JAX."""
    probe = subprocess.run(["/usr/bin/python3", "-c", "import jax"], capture_output=True, check=False)
    if probe.returncode == 0:
        pytest.skip("the system's python3 has jax")
    done = subprocess.run(
        ["/usr/bin/python3", "-m", "watchdog", "demo", "--multihost"], capture_output=True, text=True,
        timeout=60, check=False, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == EXIT_DEMO_NEEDS, done.stdout + done.stderr
    assert "jax and orbax are not installed" in done.stderr
    assert "/usr/bin/python3 -m pip install jax orbax-checkpoint" in done.stderr


@pytest.mark.slow
@needs_hosts
def test_the_multihost_demo_plays_maintenance_on_one_of_two_hosts() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "watchdog", "demo", "--multihost"], capture_output=True, text=True,
        timeout=170, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^== done in [\d.]+ s: both processes saved step \d+ and exited 0$", done.stdout, re.M)
    assert "drain exited, started" in done.stdout  # host-1's daemon drained its process
    assert "left on its own" in done.stdout  # host-0's daemon saw its process go, unsignalled
    assert "tpu_watchdog_holders_left_total 1.0" in done.stdout
