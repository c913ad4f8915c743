"""Run Pax's trainer (paxml.main) in this process after opening a device node, as a TPU job holds /dev/accel*.

Pax on CPU holds no device node: this opens the node first (O_PATH: a test's UniqueDevice has no driver),
keeps it open, registers a tiny experiment (`__main__.TinyLm`: Pax's own CPU test LM, smaller still, no
scheduled save, eval or summary within reach), then does what `python -m paxml.main` does, in this process.

Usage: python pax_launcher.py DEVICE go PAX_FLAGS...  ($PAX_TRAIN_STEPS: where training ends by itself).
Runs in the Pax venv (Python 3.10): the standard library and Pax only, nothing of the project.
"""

import os
import sys

device, mode, flags = sys.argv[1], sys.argv[2], sys.argv[3:]
held = os.open(device, os.O_PATH)
sys.stderr.write(f"launcher: holding {device} as fd {held}\n")
import jax  # noqa: E402  (imported after the node is open: the daemon sees the job at once)
from absl import app  # noqa: E402
from fiddle import absl_flags  # noqa: E402
from paxml import experiment_registry  # noqa: E402
from paxml import main as pax_main  # noqa: E402
from paxml.tasks.lm.params import lm_cloud  # noqa: E402

NEVER = 10**8  # an interval no run here reaches


@experiment_registry.register
class TinyLm(lm_cloud.LmCloudSpmdTest):
    """LmCloudSpmdTest ("SPMD model with small params for local CPU test run"), smaller: a step is fast."""

    NUM_LAYERS = 1
    VOCAB_SIZE = 64
    MODEL_DIMS = 16
    HIDDEN_DIMS = 32
    DIMS_PER_HEAD = 8
    MAX_SEQ_LEN = 16
    PERCORE_BATCH_SIZE = 1
    CHECKPOINT_EVERY_N_STEPS = NEVER
    SUMMARY_INTERVAL_STEPS = NEVER
    EVAL_INTERVAL_STEPS = NEVER

    def task(self):
        task_p = super().task()
        task_p.train.num_train_steps = int(os.environ.get("PAX_TRAIN_STEPS", NEVER))
        return task_p


sys.stderr.write("launcher: pax imported\n")
sys.stderr.flush()
if mode == "gate":
    sys.stdin.read()
sys.argv = ["paxml.main", "--exp=__main__.TinyLm", *flags]
jax.config.config_with_absl()
app.run(pax_main.main, flags_parser=absl_flags.flags_parser)
