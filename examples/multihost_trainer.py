"""One process of a multi-host JAX + Orbax job that survives maintenance on ANY of its hosts: copy this loop.

Run one process per host. On Cloud TPU, run it without --coordinator: `jax.distributed.initialize()` finds
the coordinator and the process ids itself. Given them, the job runs on CPU, all on one machine.
tpu-watchdog SIGTERMs only the processes of the hosts under maintenance; the rest of the job learns of it
through JAX's coordination service, and every process saves the same step and exits. What must be true
for that sync point:

1. `jax.distributed.initialize(...)` first, before any other JAX call and before any SIGTERM handler of
   your own: it installs JAX's preemption notifier, which owns SIGTERM. Without it, SIGTERM's default
   action kills the process and nothing is saved. A Python `signal.signal(SIGTERM, ...)` installed AFTER it
   replaces the notifier: no process ever reaches the sync point, and the host SIGKILLs the job at the
   deadline.
2. Every parameter is a global `jax.Array` sharded across the processes (`make_array_from_process_local_data`
   with a `NamedSharding`), and every process passes the SAME checkpoint directory: a host-local array
   cannot be saved by a multi-process job.
3. Every step, in every process: `manager.save(step)` and `manager.reached_preemption(step)`, with step =
   last + 1 (the sync step is agreed as the highest step any process has reported, plus one: a step that
   is skipped, or a loop that stops calling these, never meets it).
4. Once `reached_preemption(step)` is true (it saved that step, off its save interval):
   `wait_until_finished()`, `close()`, `jax.distributed.shutdown()` and EXIT. A job that keeps training
   makes the host wait the whole grace (5 minutes on maintenance) and is then SIGKILLed.

    # on every host of a Cloud TPU slice (or Multislice), the same command; a directory every host sees:
    python multihost_trainer.py --checkpoint-dir /mnt/shared/ckpt
    # on CPU, process 0 and process 1 of a 2-process job on this machine:
    JAX_PLATFORMS=cpu python multihost_trainer.py --coordinator 127.0.0.1:8476 --num-processes 2 \
        --process-id 0 --checkpoint-dir /tmp/ckpt   # and --process-id 1 beside it

`--hold PATH` keeps a file open for the whole run: the tests, the benchmark and `tpu-watchdog demo
--multihost` pass each simulated host's TPU device node, so that host's daemon sees the process as a TPU
holder. `--report PATH` writes one JSON line about how the run ended; `--ready PATH` is touched once the
job has run 5 steps (every process has joined).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

STEPS_BEFORE_READY = 5


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--coordinator", help="HOST:PORT of process 0 (none: Cloud TPU finds it)")
    parser.add_argument("--num-processes", type=int, help="with --coordinator: the job's processes")
    parser.add_argument("--process-id", type=int, help="with --coordinator: this process's index")
    parser.add_argument("--slices", type=int, default=1, help="Multislice: the job's slices (mesh rows)")
    parser.add_argument("--checkpoint-dir", required=True, type=Path, help="the same for every process")
    parser.add_argument("--save-interval", type=int, default=1000, help="regular checkpoint every N steps")
    parser.add_argument("--max-steps", type=int, default=10**9)
    parser.add_argument("--step-seconds", type=float, default=0.01, help="pace of the simulated training")
    parser.add_argument("--hold", action="append", default=[], help="a file to keep open (a TPU device)")
    parser.add_argument("--report", type=Path, help="write a JSON line about how the run ended here")
    parser.add_argument("--ready", type=Path, help=f"touch this once {STEPS_BEFORE_READY} steps have run")
    return parser.parse_args(argv)


def hold(paths: list[str]) -> list[int]:
    """Keep each path open until the process ends, as libtpu keeps /dev/accel* (O_PATH: a device node with
    no driver works too)."""
    return [os.open(path, os.O_PATH) for path in paths]


def initialize(args: argparse.Namespace) -> None:
    """Rule 1: before anything else of JAX's."""
    import jax

    if args.coordinator is None:
        jax.distributed.initialize()  # Cloud TPU: the coordinator and the process ids from the metadata
        return
    jax.distributed.initialize(
        coordinator_address=args.coordinator,
        num_processes=args.num_processes,
        process_id=args.process_id,
        cluster_detection_method="deactivate",  # on one machine: no cloud to detect
    )


def sharded_params(args: argparse.Namespace) -> dict[str, Any]:
    """Rule 2: one global array, its rows spread over every device of the job (slices x hosts)."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = np.array(jax.devices()).reshape(args.slices, -1)
    mesh = Mesh(devices, ("slice", "host"))
    sharding = NamedSharding(mesh, PartitionSpec(("slice", "host")))
    local_rows = 4 * jax.local_device_count()
    local = np.full((local_rows, 8), float(jax.process_index()), dtype=np.float32)
    return {"w": jax.make_array_from_process_local_data(sharding, local)}


def train(args: argparse.Namespace) -> dict[str, Any]:
    """Rules 3 and 4: save and reached_preemption every step, step = last + 1; exit after the sync save."""
    import jax
    import orbax.checkpoint as ocp

    manager = ocp.CheckpointManager(
        args.checkpoint_dir.resolve(),
        options=ocp.CheckpointManagerOptions(save_interval_steps=args.save_interval, max_to_keep=2),
    )
    params = sharded_params(args)
    step = manager.latest_step() or 0
    if step:
        params = manager.restore(step, args=ocp.args.StandardRestore(params))
    update = jax.jit(lambda p: {"w": p["w"] + 0.01})
    me = f"process {jax.process_index()}/{jax.process_count()}"
    print(f"{me}: training from step {step} (pid {os.getpid()})")
    sys.stdout.flush()
    outcome = "finished"
    while step < args.max_steps:
        step += 1
        params = update(params)
        manager.save(step, args=ocp.args.StandardSave(params))
        if manager.reached_preemption(step):
            outcome = "preempted"
            break
        if args.ready and step == STEPS_BEFORE_READY:
            args.ready.touch()
        time.sleep(args.step_seconds)
    manager.wait_until_finished()
    saved = sorted(manager.all_steps())
    manager.close()
    print(f"process {jax.process_index()}: {outcome}: checkpoint saved at step {step}")
    return {"process_id": jax.process_index(), "outcome": outcome, "step": step, "saved_steps": saved}


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    hold(args.hold)
    initialize(args)
    report = train(args)
    import jax

    jax.distributed.shutdown()
    if args.report:
        args.report.write_text(json.dumps(report) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
