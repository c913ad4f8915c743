"""tpu-watchdog: drain Cloud TPU VM workloads ahead of host maintenance and preemption."""

__version__ = "0.1.0"
