"""A sample training job for the demo: holds a (simulated) TPU device and checkpoints on SIGTERM.

It behaves like a job built the right way (see examples/jax_orbax_trainer.py for the real JAX + Orbax one):
a regular checkpoint every `--save-every` steps, and on SIGTERM one more at the current step, then exit 0.
Pure Python, so the demo starts in a blink. `python -m watchdog.fake.trainer --help`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path


def save(directory: Path, step: int, reason: str) -> Path:
    """Atomically write checkpoint `step` (a real file an SRE can look at)."""
    path = directory / f"checkpoint-{step:06d}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"step": step, "reason": reason, "saved_at": time.time()}) + "\n")
    os.replace(tmp, path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--hold", required=True, help="the device file to hold open, like libtpu does")
    parser.add_argument("--checkpoint-dir", required=True, type=Path)
    parser.add_argument("--save-every", type=int, default=1000)
    parser.add_argument("--step-seconds", type=float, default=0.01)
    args = parser.parse_args(argv)

    device = os.open(args.hold, os.O_RDONLY)
    args.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    preempted = False

    def on_sigterm(signum: int, frame: object) -> None:
        nonlocal preempted
        preempted = True  # acted on between steps, like JAX's preemption sync point

    signal.signal(signal.SIGTERM, on_sigterm)
    sys.stdout.write(f"training (pid {os.getpid()}), holding {args.hold}\n")
    sys.stdout.flush()
    step = 0
    while True:
        step += 1
        time.sleep(args.step_seconds)  # the "training step"
        if step % args.save_every == 0:
            save(args.checkpoint_dir, step, "interval")
        if preempted:
            path = save(args.checkpoint_dir, step, "SIGTERM")
            sys.stdout.write(f"SIGTERM: checkpoint saved at step {step} -> {path}\n")
            sys.stdout.flush()
            os.close(device)
            return 0


if __name__ == "__main__":
    sys.exit(main())
