"""Which TPU device nodes this host watches: looked at every `DEVICE_CHECK` s, shown in /status `devices`
and `tpu_watchdog_devices`, and said in the journal at start and whenever the set changes.

A host whose patterns match no TPU device looks healthy otherwise (nothing holds a device, nothing is ever
drained), so an empty set is a warning (`no_devices`) each time it becomes empty, and the alert
TPUWatchdogNoDevices fires on a TPU VM that stays so. The look is a glob and a few sysfs reads per node, on
the loop thread: far less than one holder scan.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from watchdog.core.devices import notes
from watchdog.core.vocabulary import Output
from watchdog.daemon.outputs import Outputs
from watchdog.daemon.view import StatusView
from watchdog.host.devices import DeviceSet
from watchdog.surface.logs import fields

log = logging.getLogger("tpu-watchdog")

DEVICE_CHECK = 30.0  # s between looks at which nodes the patterns match (the alert waits 10 minutes)


class DeviceWatch:
    def __init__(
        self,
        find: Callable[[], DeviceSet],
        patterns: Sequence[str],
        view: StatusView,
        outputs: Outputs,
        interval: float = DEVICE_CHECK,
    ) -> None:
        self._find, self.patterns, self._view, self._outputs = find, tuple(patterns), view, outputs
        self._interval = interval
        self._next = 0.0
        self._said: tuple[object, ...] | None = None  # what the last look found, as last said

    def check(self, now: float) -> None:
        """Look again when due (the first call always looks): show what matched; say it when it changed.
        /status, the gauge and each line are guarded apart: one that fails leaves the others told."""
        if now < self._next:
            return
        self._next = now + self._interval
        found = self._find()
        with self._outputs.guarded(Output.STATUS):
            self._view.devices = found.matched
        with self._outputs.guarded(Output.METRICS):
            self._outputs.metrics.devices.set(len(found.nodes))
        seen = tuple((m.path, m.number, m.judgement) for m in found.matched)
        if seen != self._said:
            self._say(found, first=self._said is None)
            self._said = seen

    @property
    def next_due(self) -> float:
        """When `check` looks next (monotonic)."""
        return self._next

    def _say(self, found: DeviceSet, first: bool) -> None:
        nodes = found.nodes
        with self._outputs.guarded(Output.LOG):
            if nodes:
                log.info(
                    "%s %d TPU device node(s): %s", "watching" if first else "now watching", len(nodes),
                    "; ".join(node.describe() for node in nodes),
                )  # fmt: skip
            else:
                log.warning(
                    "no TPU device node matches the device patterns (%s)%s: this host protects nothing (no "
                    "process can be a TPU holder); fix devices.patterns (devices.nvidia_patterns on a GPU "
                    "VM: docs/gpu-vms.md), or see docs/devices.md",
                    " ".join(self.patterns), "" if first else " any more",
                    extra=fields("no_devices"),
                )  # fmt: skip
        for warning, sentence in notes(found.matched):
            with self._outputs.guarded(Output.LOG):
                log.log(logging.WARNING if warning else logging.INFO, "%s", sentence)
