"""MaxText under the daemon, for real: MaxText 0.2.5's own trainer on CPU (a tiny decoder on synthetic data,
enable_checkpointing, enable_autocheckpoint, checkpoint_period far beyond any step reached) holding the test's
device node, a daemon and the fake metadata server.

1. maintenance-event TERMINATE_ON_HOST_MAINTENANCE: MaxText reaches its preemption sync point, saves a
   checkpoint at that step (not a multiple of checkpoint_period), commits it, exits 0; the drain is `exited`
   with nothing lost. 2. The same run again: it restores from that checkpoint; preempted TRUE, the same.
   3. Again, with no event: it restores from the second checkpoint and trains on to its end.
And a MaxText job SIGTERMed before its distributed initialisation (where JAX installs the handler that
turns SIGTERM into a save) dies of SIGTERM, saves nothing, and the drain record says its progress was lost.

Each test runs in a private PID namespace (the daemon can only see and signal what the test started) and
network namespace (MaxText's coordinator binds port 1234 on every interface). MaxText needs Python >= 3.12:
it runs in its own venv (`make maxtext-setup`, which `make test` runs); without one the tests are SKIPPED
with the reason.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.frameworks import MAXTEXT_VENV, maxtext_skip_reason
from tests.support.workloads import UniqueDevice

REPO = Path(__file__).resolve().parents[2]
CHECKPOINT_PERIOD = 100_000  # far beyond any step these runs reach: every save here is an unscheduled one
TINY = [  # the decoder of frameworks.md, smaller still: a step is milliseconds on a busy CPU
    "hardware=cpu", "dataset_type=synthetic", "base_emb_dim=32", "base_num_query_heads=2",
    "base_num_kv_heads=2", "head_dim=16", "base_mlp_dim=64", "base_num_decoder_layers=1", "vocab_size=64",
    "max_target_length=16", "per_device_batch_size=1", "attention=dot_product",
    "enable_checkpointing=true", "enable_autocheckpoint=true", f"checkpoint_period={CHECKPOINT_PERIOD}",
    "save_checkpoint_on_start=false", "enable_goodput_recording=false", "monitor_goodput=false",
    "enable_tensorboard=false", "log_config=false", "jax_cache_dir=",
]  # fmt: skip
MAINTENANCE = {"key": "instance/maintenance-event", "value": "TERMINATE_ON_HOST_MAINTENANCE", "clear": "NONE"}
PREEMPTED = {"key": "instance/preempted", "value": "TRUE", "clear": "FALSE"}

SKIP = maxtext_skip_reason()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(SKIP is not None, reason=SKIP or ""),
    pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)"),
]


@pytest.fixture
def device(tmp_path: Path) -> Iterator[Path]:
    with UniqueDevice(tmp_path) as node:
        yield node.path


def drive(tmp_path: Path, device: Path, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run the plan under a daemon (tests/support/maxtext_driver.py) in private PID and net namespaces."""
    configs = sorted(MAXTEXT_VENV.glob("lib/python3.*/site-packages/maxtext/configs/base.yml"))
    assert configs, f"no maxtext/configs/base.yml in {MAXTEXT_VENV}"
    plan = {
        "tmp": str(tmp_path), "device": str(device), "result": str(tmp_path / "result.json"),
        "python": str(MAXTEXT_VENV / "bin" / "python"),
        "launcher": str(REPO / "tests" / "support" / "maxtext_launcher.py"),
        "maxtext_args": [str(configs[0]), f"base_output_directory={tmp_path / 'out'}", *TINY],
        "runs": runs,
    }  # fmt: skip
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    done = subprocess.run(
        ["unshare", "--pid", "--net", "--fork", "--kill-child", "--mount-proc", sys.executable, "-m",
         "tests.support.maxtext_driver", str(tmp_path / "plan.json")],
        capture_output=True, text=True, timeout=1500, check=False, cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    daemon_log = (tmp_path / "daemon.log").read_text() if (tmp_path / "daemon.log").exists() else ""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:] + daemon_log[-3000:]
    results: list[dict[str, Any]] = json.loads((tmp_path / "result.json").read_text())
    return results


def saved_at_sync_point(result: dict[str, Any], checkpoints: Path) -> int:
    """The step MaxText saved at because of the SIGTERM; checks the save is whole and the drain clean."""
    log = result["log"]
    assert result["returncode"] == 0, log[-3000:]
    assert "Job received termination signal (SIGTERM)" in log, log[-3000:]
    marker = "Reached preemption sync point, step="
    step = int(log.split(marker, 1)[1].split()[0])
    assert step % CHECKPOINT_PERIOD != 0  # unscheduled: saved because of the SIGTERM
    assert (checkpoints / str(step) / "commit_success.txt").exists()  # Orbax committed it
    assert (checkpoints / str(step) / "_CHECKPOINT_METADATA").exists()
    drain = result["drain"]
    assert drain["outcome"] == "exited", drain
    assert drain["lost_progress"] == 0, drain
    [proc] = drain["processes"]
    assert proc["exit_status"] == "exited 0", proc
    assert proc["loss"] is None
    return step


@pytest.mark.timeout(1500)  # three MaxText starts, each 40-120 s of imports and compiling on 2 busy cores
def test_maxtext_saves_on_maintenance_and_on_preemption_then_resumes(tmp_path: Path, device: Path) -> None:
    checkpoints = tmp_path / "out" / "R" / "checkpoints"
    run = ["run_name=R", "steps=100000000"]
    maintenance, preempted, resumed = drive(tmp_path, device, [
        {"name": "maintenance", "args": run, "event": MAINTENANCE, "event_after_steps": 5},
        {"name": "preempted", "args": run, "event": PREEMPTED, "event_after_steps": 5},
        {"name": "resumed", "args": ["run_name=R"], "checkpoints": str(checkpoints), "steps_after_latest": 3},
    ])  # fmt: skip
    first = saved_at_sync_point(maintenance, checkpoints)
    assert f"restoring from this run's directory step {first}" in preempted["log"]
    second = saved_at_sync_point(preempted, checkpoints)
    assert second > first  # it went on from the first checkpoint, not from scratch
    assert f"restoring from this run's directory step {second}" in resumed["log"]
    assert resumed["returncode"] == 0, resumed["log"][-3000:]
    assert f"completed step: {second + 2}" in resumed["log"]
    assert "completed step: 0," not in resumed["log"]  # resumed, not restarted


@pytest.mark.timeout(600)
def test_maxtext_sigtermed_before_distributed_init_is_reported_as_lost_progress(
    tmp_path: Path, device: Path
) -> None:
    """The job is SIGTERMed after MaxText is imported, before train main (and so before
    jax.distributed.initialize): Python's default disposition, as during MaxText's imports."""
    [early] = drive(tmp_path, device, [
        {"name": "early", "args": ["run_name=E", "steps=1000"], "event": MAINTENANCE, "gate": True},
    ])  # fmt: skip
    assert early["returncode"] == -15, early["log"][-3000:]  # a shell reports it as exit 143
    assert "initialize the jax distributed system" not in early["log"]  # died before it
    assert not (tmp_path / "out" / "E" / "checkpoints").exists()  # nothing saved
    drain = early["drain"]
    assert drain["outcome"] == "exited", drain  # it did exit in time ...
    assert drain["lost_progress"] == 1, drain  # ... and lost its progress: not a success
    [proc] = drain["processes"]
    assert proc["exit_status"] == "killed by signal 15", proc
    assert proc["loss"] == "sigterm_default"
    # TODO(hist): once the drain history lands, assert `tpu-watchdog history` shows this drain as lost.
