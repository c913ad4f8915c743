"""Files of the state directory, handled without trusting what is in it: never through a symlink, never
blocking on a planted FIFO or device, never overwriting an earlier file set aside."""

from __future__ import annotations

import contextlib
import errno
import os
import stat


def link_unique(source: str, target: str) -> str:
    """Hard-link `source` as `target` (or `target-N` if taken): never overwrites an earlier one."""
    for n in range(1000):
        candidate = target if n == 0 else f"{target}-{n}"
        try:
            os.link(source, candidate, follow_symlinks=False)  # a planted symlink is moved, not its target
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(errno.EEXIST, "no free name", target)


def read_regular(path: str, limit: int) -> bytes:
    """Up to `limit` bytes of a regular file, never through a symlink (ELOOP) and never blocking on a
    planted FIFO or device: the state directory is ours, anything else in it is not trusted."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        chunks: list[bytes] = []
        size = 0
        while size < limit:
            chunk = os.read(fd, limit - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
