"""`python -m watchdog` is the same as the `tpu-watchdog` console script."""

import sys

from watchdog.cli import main

sys.exit(main())
