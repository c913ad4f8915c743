"""A JAX + Orbax training loop that survives host maintenance: SIGTERM makes it save a checkpoint and exit 0.

What it takes (see docs/frameworks/jax-orbax.md):
- `jax.distributed.initialize(...)` before anything else, so JAX's preemption notifier owns SIGTERM
  (without it, SIGTERM's default action kills the process and no checkpoint is written);
- an Orbax `CheckpointManager`, whose `save(step)` also saves at a step that is not a multiple of the save
  interval once `reached_preemption(step)` is true (the sync point agreed after SIGTERM);
- the step growing by exactly 1 per call, and after the preemption save: `wait_until_finished()`, then exit.
  A job that keeps training after the save makes the host wait the whole grace period.

It runs on CPU. `--hold PATH` keeps a file open for the whole run (the tpu-watchdog demo and tests pass a
simulated TPU device node, so the watchdog sees this process as a TPU holder).

    python examples/jax_orbax_trainer.py --checkpoint-dir /tmp/ckpt --hold /dev/accel0
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint-dir", required=True, type=Path)
    parser.add_argument("--hold", action="append", default=[], help="a file to keep open (a TPU device)")
    parser.add_argument("--save-interval", type=int, default=1000, help="regular checkpoint every N steps")
    parser.add_argument("--max-steps", type=int, default=10**9)
    parser.add_argument("--step-seconds", type=float, default=0.01, help="pace of the simulated training")
    parser.add_argument("--report", type=Path, help="write a JSON line about how the run ended here")
    parser.add_argument("--ready", type=Path, help="touch this file once 5 steps have run")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    held = [os.open(path, os.O_RDONLY) for path in args.hold]  # the "TPU", held like libtpu holds it

    import jax  # imported late: start-up of the holder is visible before JAX's own start-up cost

    jax.distributed.initialize(
        coordinator_address=f"localhost:{free_port()}",
        num_processes=1,
        process_id=0,
        cluster_detection_method="deactivate",
    )
    import jax.numpy as jnp
    import orbax.checkpoint as ocp

    manager = ocp.CheckpointManager(
        args.checkpoint_dir.resolve(),
        options=ocp.CheckpointManagerOptions(save_interval_steps=args.save_interval, max_to_keep=2),
    )
    params = {"w": jnp.zeros((16, 16)), "b": jnp.zeros((16,))}
    step = manager.latest_step() or 0
    if step:
        params = manager.restore(step, args=ocp.args.StandardRestore(params))
        sys.stdout.write(f"resumed from step {step}\n")

    @jax.jit
    def train_step(p: dict[str, jax.Array]) -> dict[str, jax.Array]:
        return {"w": p["w"] + 0.01, "b": p["b"] - 0.01}

    sys.stdout.write(f"training from step {step} (pid {os.getpid()})\n")
    sys.stdout.flush()
    outcome = "finished"
    while step < args.max_steps:
        step += 1
        params = train_step(params)
        manager.save(step, args=ocp.args.StandardSave(params))
        if manager.reached_preemption(step):
            manager.wait_until_finished()
            outcome = "preempted"
            break
        if args.ready and step == 5:
            args.ready.touch()
        time.sleep(args.step_seconds)
    manager.wait_until_finished()
    manager.close()
    message = {"outcome": outcome, "step": step, "saved_steps": sorted(manager.all_steps())}
    sys.stdout.write(f"{outcome}: checkpoint saved at step {step}\n")
    if args.report:
        args.report.write_text(json.dumps(message) + "\n")
    for fd in held:
        os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
