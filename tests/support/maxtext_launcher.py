"""Run MaxText's trainer in this process after opening a device node, as a TPU job holds /dev/accel*.

MaxText on CPU holds no device node, so the daemon would have nothing to signal: this opens the node first
(O_PATH: a test's UniqueDevice has no driver) and keeps it open for the whole run, then calls MaxText's own
train main in the same process, so the SIGTERM the daemon sends lands in MaxText itself.

Usage: python maxtext_launcher.py DEVICE go|gate MAXTEXT_ARGS...  With "gate", once MaxText is imported it
waits for stdin to close before training: a SIGTERM then lands before its distributed initialisation, with
Python's default disposition, as one during MaxText's imports would.
Runs in the MaxText venv (Python >= 3.12): the standard library and MaxText only, nothing of the project.
"""

import os
import sys

device, mode, args = sys.argv[1], sys.argv[2], sys.argv[3:]
held = os.open(device, os.O_PATH)
sys.stderr.write(f"launcher: holding {device} as fd {held}\n")
from absl import app  # noqa: E402  (imported after the node is open: the daemon sees the job at once)
from maxtext.trainers.pre_train import train  # noqa: E402

sys.stderr.write("launcher: maxtext imported\n")
sys.stderr.flush()
if mode == "gate":
    sys.stdin.read()
sys.argv = ["maxtext.trainers.pre_train.train", *args]
app.run(train.main)
