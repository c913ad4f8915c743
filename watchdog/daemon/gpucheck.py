"""On a GPU host, the holder scan checked against NVML's compute processes, and what differs said.

A scanner wrapped so that a scan at most once per `interval` is also handed to a thread of its own, which
asks NVML (host/nvml.py) and logs who one sees and the other does not (`core.accelerators.CrossCheck`),
once per difference. The scan returns at once: NVML can hang on a sick GPU, and a drain never waits for it.
The thread runs while it has a scan to compare, then ends: between comparisons nothing here wakes up.
Nothing here changes who is signalled.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from watchdog.core.accelerators import CrossCheck, cross_check
from watchdog.core.vocabulary import Output
from watchdog.daemon.draining import Scanner
from watchdog.daemon.outputs import Outputs
from watchdog.host.nvml import GpuProcesses

log = logging.getLogger("tpu-watchdog")

CROSS_CHECK_INTERVAL = 60.0  # s between NVML queries: the idle index refreshes this often


class CrossChecked:
    """`inner`, whose scans are cross-checked with `gpus` in the background. Everything else (the warm
    index's `recheck`, `devices`) is the inner scanner's."""

    def __init__(
        self,
        inner: Scanner,
        gpus: GpuProcesses,
        stop: threading.Event,
        *,
        outputs: Outputs,
        interval: float = CROSS_CHECK_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner, self.gpus, self.stop, self.interval, self.clock = inner, gpus, stop, interval, clock
        self.outputs = outputs
        self._latest: Any = None
        self._next = 0.0
        self._said: CrossCheck | None = None
        self._failed = False
        self._lock = threading.Lock()  # the thread's comparisons and a caller's: one at a time
        self._handing = threading.Lock()  # `_latest` and `_comparing`, between a scan and the thread
        self._comparing = False  # a thread is running (it takes `_latest` before it ends)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def scan(self) -> Any:
        result = self.inner.scan()
        now = self.clock()
        if now >= self._next:
            self._next = now + self.interval
            with self._handing:
                self._latest, start = result, not self._comparing
                self._comparing = True
            if start:
                threading.Thread(target=self._run, name="gpu-cross-check", daemon=True).start()
        return result

    def _run(self) -> None:
        while not self.stop.is_set() and (result := self._take()) is not None:
            self.compare(result)

    def _take(self) -> Any:
        """The scan to compare next, or None: nothing left, and the thread ends."""
        with self._handing:
            result, self._latest = self._latest, None
            self._comparing = result is not None
            return result

    def compare(self, result: Any) -> CrossCheck | None:
        """Ask NVML now and say what differs from `result` (a ScanResult); None when NVML failed."""
        with self._lock:
            return self._compare(result)

    def _compare(self, result: Any) -> CrossCheck | None:
        try:
            listed = self.gpus.compute_processes()
        except OSError as exc:
            if not self._failed:
                self._failed = True
                with self.outputs.guarded(Output.LOG):  # the check's thread outlives its lines
                    log.warning("GPU cross-check: %s; the scan alone decides, as always", exc)
            return None
        self._failed = False
        seen = [*result.holders, *getattr(result, "agents", ())]
        check = cross_check((h.pid for h in seen), listed)
        if check and check != self._said:
            for sentence in check.sentences({h.pid: h.name for h in seen}):
                with self.outputs.guarded(Output.LOG):
                    log.warning("GPU cross-check: %s", sentence)
        self._said = check
        return check
