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
it runs in its own venv (`make maxtext-setup`; `make test-frameworks` builds it and runs these tests); without
one the tests are SKIPPED with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.framework_runs import (
    MAINTENANCE,
    PREEMPTED,
    assert_kept_progress,
    assert_lost_progress,
    base_plan,
    drive,
    marks,
)
from tests.support.frameworks import MAXTEXT

CHECKPOINT_PERIOD = 100_000  # far beyond any step these runs reach: every save here is an unscheduled one
TINY = [  # the decoder of frameworks.md, smaller still: a step is milliseconds on a busy CPU
    "hardware=cpu", "dataset_type=synthetic", "base_emb_dim=32", "base_num_query_heads=2",
    "base_num_kv_heads=2", "head_dim=16", "base_mlp_dim=64", "base_num_decoder_layers=1", "vocab_size=64",
    "max_target_length=16", "per_device_batch_size=1", "attention=dot_product",
    "enable_checkpointing=true", "enable_autocheckpoint=true", f"checkpoint_period={CHECKPOINT_PERIOD}",
    "save_checkpoint_on_start=false", "enable_goodput_recording=false", "monitor_goodput=false",
    "enable_tensorboard=false", "log_config=false", "jax_cache_dir=",
]  # fmt: skip
ENV = {  # what MaxText's initialize_jax_for_cpu reads, for one process (frameworks.md)
    "DECOUPLE_GCLOUD": "TRUE", "JAX_PLATFORMS": "cpu", "JAX_COORDINATOR_ADDRESS": "127.0.0.1",
    "JOB_INDEX": "0", "JOB_COMPLETION_INDEX": "0", "PROCESSES_IN_JOB": "1", "JAX_PROCESS_COUNT": "1",
}  # fmt: skip

pytestmark = marks(MAXTEXT)


@pytest.fixture
def plan(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """What every run of a test shares: MaxText's trainer holding the test's device node, the tiny model."""
    configs = sorted(MAXTEXT.venv.glob("lib/python3.*/site-packages/maxtext/configs/base.yml"))
    assert configs, f"no maxtext/configs/base.yml in {MAXTEXT.venv}"
    args = [str(configs[0]), f"base_output_directory={tmp_path / 'out'}", *TINY]
    with base_plan(
        tmp_path, MAXTEXT, args=args, env=ENV,
        step_pattern=r"completed step: \d+", imported="launcher: maxtext imported",
        checkpoints=str(tmp_path / "out" / "R" / "checkpoints"), steps_as=["arg", "steps="],
        start_timeout=600,  # to its first steps: up to 3.5 min seen on 2 cores at load 28
    ) as plan:  # fmt: skip
        yield plan


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
    assert_kept_progress(result, 0)
    return step


@pytest.mark.timeout(2400)  # three MaxText starts, each 1-6 min of imports and compiling on 2 busy cores
def test_maxtext_saves_on_maintenance_and_on_preemption_then_resumes(
    tmp_path: Path, plan: dict[str, Any]
) -> None:
    checkpoints = Path(plan["checkpoints"])
    run = ["run_name=R", "steps=100000000"]
    maintenance, preempted, resumed = drive(tmp_path, plan, [
        {"name": "maintenance", "args": run, "event": MAINTENANCE, "event_after_steps": 5},
        {"name": "preempted", "args": run, "event": PREEMPTED, "event_after_steps": 5},
        {"name": "resumed", "args": ["run_name=R"], "steps_after_latest": 3},
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
    tmp_path: Path, plan: dict[str, Any]
) -> None:
    """The job is SIGTERMed after MaxText is imported, before train main (and so before
    jax.distributed.initialize): Python's default disposition, as during MaxText's imports."""
    [early] = drive(tmp_path, plan, [
        {"name": "early", "args": ["run_name=E", "steps=1000"], "event": MAINTENANCE, "gate": True},
    ])  # fmt: skip
    assert early["returncode"] == -15, early["log"][-3000:]  # a shell reports it as exit 143
    assert "initialize the jax distributed system" not in early["log"]  # died before it
    assert not (tmp_path / "out" / "E" / "checkpoints").exists()  # nothing saved
    assert_lost_progress(early)  # in the drain record and in `tpu-watchdog history`
