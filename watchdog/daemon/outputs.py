"""Signal first, then tell: every output of the daemon (a log line, a metric, a webhook notice, a hook, the
history, /status, sd_notify) runs inside `Outputs.guarded`, so a failure in one is caught, counted in
`tpu_watchdog_output_errors_total{output}` and logged once, and never reaches the drain or the loop.

Logged once per place that failed (output, exception type, the line that raised): a log handler that
fails on every line, or a metric that fails every tick, must not flood the journal, and the report of a
failure is itself a log line that may fail, so it is attempted and then forgotten.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import traceback
from types import TracebackType

from watchdog.core.vocabulary import Output
from watchdog.surface.metrics import Metrics

log = logging.getLogger("tpu-watchdog")


class Outputs:
    """The daemon's one guard around what it tells; any thread may use it."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._said: set[tuple[Output, str, str, int]] = set()
        self._lock = threading.Lock()

    def guarded(self, output: Output) -> Guard:
        """`with outputs.guarded(Output.LOG): log.warning(...)`: an exception in the block ends the block
        only."""
        return Guard(self, output)

    def failed(self, output: Output, error: Exception) -> None:
        """Count `error`; log it the first time this place fails this way."""
        with contextlib.suppress(Exception):  # the counter is an output too; nothing is left to tell
            self.metrics.output_errors.labels(output.value).inc()
        frames = traceback.extract_tb(error.__traceback__)
        where = (frames[-1].filename, frames[-1].lineno or 0) if frames else ("", 0)
        key = (output, type(error).__name__, *where)
        with self._lock:
            if key in self._said:
                return
            self._said.add(key)
        with contextlib.suppress(Exception):  # the log may be what failed: counted above, nothing more to do
            log.error(
                "a %s output failed (%s: %s); nothing else was stopped by it, the daemon carries on "
                "(counted in tpu_watchdog_output_errors_total; said once per place)",
                output.value, type(error).__name__, error, exc_info=error,
            )  # fmt: skip


class Guard:
    """The context of one output: swallows an Exception (never a KeyboardInterrupt or SystemExit)."""

    def __init__(self, outputs: Outputs, output: Output) -> None:
        self.outputs, self.output = outputs, output

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if isinstance(error, Exception):
            self.outputs.failed(self.output, error)
            return True
        return False
