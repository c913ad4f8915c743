"""A log that fails on every line, as a broken journal connection or log shipper would: the fault a thread
of the daemon must outlive (signal first, then tell; a dead watch is a missed event)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator


class FailingLines(logging.Handler):
    """Raises on every record it is handed, at every level; keeps the message of each it refused."""

    def __init__(self) -> None:
        super().__init__()
        self._refused: list[str] = []
        self._refused_lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        with self._refused_lock:
            self._refused.append(message)
        raise RuntimeError(f"the journal refused {message!r}")

    def refused(self, containing: str = "") -> list[str]:
        with self._refused_lock:
            return [m for m in self._refused if containing in m]


@contextlib.contextmanager
def every_line_raising(*names: str) -> Iterator[FailingLines]:
    """Every line of the loggers `names`, debug lines too, raises while the block runs."""
    handler = FailingLines()
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)
