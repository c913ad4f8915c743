"""A small tmpfs mounted for one test: a full disk (size=64k) or a read-only state directory (ro)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def tmpfs(mountpoint: Path, options: str = "") -> Iterator[Path]:
    """Mount a 64 KiB tmpfs (mode 0700, plus `options`, e.g. "ro") on `mountpoint` (made here), for the
    block; skips the test when not root."""
    if os.geteuid() != 0:
        pytest.skip("mounts a tmpfs: needs root")
    mountpoint.mkdir(exist_ok=True)
    flags = ",".join(o for o in (options, "size=64k,mode=0700") if o)
    subprocess.run(["mount", "-t", "tmpfs", "-o", flags, "tmpfs", str(mountpoint)], check=True)
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)
