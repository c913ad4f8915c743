"""Which of some files can be read now: poll, not select, whose descriptors stop at 1023.

A test worker that has run the fifty-host fleet, or many tests before it, holds descriptors above that.
"""

from __future__ import annotations

import select
from typing import Any

Readable = Any  # a descriptor, a file or a socket: anything poll takes


def readable(files: list[Readable], timeout: float = 0.0) -> list[Readable]:
    """The members of `files` that can be read (or are at EOF) within `timeout` s; [] if none."""
    poller = select.poll()
    by_fd: dict[int, Readable] = {}
    for file in files:
        fd: int = file if isinstance(file, int) else file.fileno()
        by_fd[fd] = file
        poller.register(fd, select.POLLIN)
    ready = poller.poll(max(0.0, timeout) * 1000)
    return [by_fd[fd] for fd, _ in ready]
