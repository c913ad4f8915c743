"""Pax under the daemon, for real: paxml 1.4.0's trainer on CPU (Pax's own CPU test language model, smaller:
tests/support/pax_launcher.py) with `--jax_fully_async_checkpoint=1 --exit_after_ondemand_checkpoint=1`,
holding the test's device node, a daemon and the fake metadata server.

1. maintenance-event TERMINATE_ON_HOST_MAINTENANCE: Pax reaches its preemption sync point, saves "due to
   preemption" at that step (its interval is never reached), waits for the save and exits: with status 1,
   Pax's own `exit(1)` after an on-demand checkpoint. The drain is `exited`, nothing lost.
2. The same job again: it restores from that checkpoint; preempted TRUE, the same.
3. Again, with no event: it restores from the second checkpoint and trains on to its end, exit 0.

Pax needs Python 3.10 (lingvo 0.12.7): it runs in its own venv (`make pax-setup`; `make test-frameworks`
builds it and runs these tests); without one the tests are SKIPPED with the reason. Private PID and network
namespaces, as for MaxText.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.framework_runs import MAINTENANCE, PREEMPTED, assert_kept_progress, base_plan, drive, marks
from tests.support.frameworks import PAX

NEVER = 10**8  # the launcher's TinyLm: no scheduled save, eval or summary is reached
pytestmark = marks(PAX)


@pytest.fixture
def plan(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """What every run shares: Pax's trainer holding the test's device node, its two flags, one process."""
    flags = [
        f"--job_log_dir={tmp_path / 'job'}",
        "--jax_fully_async_checkpoint=1",
        "--exit_after_ondemand_checkpoint=1",
        "--server_addr=127.0.0.1:8476",
        "--num_hosts=1",
        "--host_idx=0",
    ]
    with base_plan(
        tmp_path, PAX, args=flags, env={"JAX_PLATFORMS": "cpu"},
        step_pattern=r"\[PAX STATUS\]: Step `\d+` completed", imported="launcher: pax imported",
        checkpoints=str(tmp_path / "job" / "checkpoints"), steps_as=["env", "PAX_TRAIN_STEPS"],
        start_timeout=900,  # to its first steps: 6-7 min on 2 cores at load 20 (TensorFlow, compiling)
    ) as plan:  # fmt: skip
        yield plan


def saved_on_demand(result: dict[str, Any], checkpoints: Path) -> int:
    """The step Pax saved at because of the SIGTERM; checks the save is whole and the drain clean."""
    log = result["log"]
    assert result["returncode"] == 1, log[-3000:]  # Pax's exit(1) after an on-demand checkpoint
    marker = "Saving checkpoint at step "
    line = next(line for line in log.splitlines() if marker in line and "due to preemption" in line)
    step = int(line.split(marker, 1)[1].split()[0])
    assert step != 0  # Pax saves step 0 at the start: this is not that one
    assert step % NEVER != 0  # unscheduled: saved because of the SIGTERM
    saved = checkpoints / f"checkpoint_{step:08d}"  # renamed from its tmp dir: committed
    assert saved.is_dir(), sorted(p.name for p in checkpoints.iterdir())
    assert not list(checkpoints.glob("*orbax-checkpoint-tmp*"))  # nothing half-written left
    assert_kept_progress(result, 1)
    return step


@pytest.mark.timeout(2400)  # three Pax starts, each 2-7 min of imports and compiling on 2 busy cores
def test_pax_saves_on_maintenance_and_on_preemption_then_resumes(
    tmp_path: Path, plan: dict[str, Any]
) -> None:
    checkpoints = Path(plan["checkpoints"])
    maintenance, preempted, resumed = drive(tmp_path, plan, [
        {"name": "maintenance", "args": [], "event": MAINTENANCE, "event_after_steps": 3},
        {"name": "preempted", "args": [], "event": PREEMPTED, "event_after_steps": 2},
        {"name": "resumed", "args": [], "steps_after_latest": 2},
    ])  # fmt: skip
    first = saved_on_demand(maintenance, checkpoints)
    second = saved_on_demand(preempted, checkpoints)
    assert second > first  # it went on from the first checkpoint, not from scratch
    assert resumed["returncode"] == 0, resumed["log"][-3000:]
    assert f"Training loop completed (step (`{second + 2}`)" in resumed["log"], resumed["log"][-3000:]
