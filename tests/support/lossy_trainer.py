"""examples/multihost_trainer.py with one of the mistakes that lose a job's progress, for the tests that show
what the daemon (and its record) makes of them. The trainer's own flags, and `--mistake` (anywhere):

- `no-initialize`: no `jax.distributed.initialize`, so no preemption notifier: SIGTERM keeps its default
  action and kills the process before any save (a one-process job: without it there is no job to join);
- `handler-after-initialize`: a Python SIGTERM handler installed after initialize replaces JAX's notifier:
  the process looks ready from outside (SIGTERM caught), never reaches the sync point, and runs on until
  SIGKILL at the deadline.
"""

from __future__ import annotations

import importlib.util
import signal
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "multihost_trainer.py"
MISTAKES = ("no-initialize", "handler-after-initialize")


def main(argv: list[str]) -> int:
    at = argv.index("--mistake") if "--mistake" in argv else -1
    if at < 0 or at + 1 >= len(argv) or argv[at + 1] not in MISTAKES:
        sys.stderr.write(f"usage: lossy_trainer.py --mistake {{{','.join(MISTAKES)}}} TRAINER-FLAGS...\n")
        return 2
    mistake, rest = argv[at + 1], argv[:at] + argv[at + 2 :]
    spec = importlib.util.spec_from_file_location("multihost_trainer", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    trainer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trainer)
    args = trainer.parse_args(rest)
    trainer.hold(args.hold)
    if mistake == "handler-after-initialize":
        trainer.initialize(args)
        signal.signal(signal.SIGTERM, lambda *_: sys.stdout.write("SIGTERM: will save later\n"))
    trainer.train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
