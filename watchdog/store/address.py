"""Where the running daemon's HTTP listener is: `STATE_DIR/listen`, one line `HOST:PORT`.

`tpu-watchdog status` finds the daemon through its state dir, not through the configuration: after `listen` is
edited, and before the restart that applies it, the file names the new address and the daemon still listens on
the old one. The daemon writes the file when it binds and removes it when it stops; one left by a daemon that
was killed names an address nothing may answer on, and `status` then tries the configuration's too.
"""

from __future__ import annotations

import contextlib
import glob
import os

LISTEN_FILE = "listen"


def write_listen_address(state_dir: str, address: str) -> None:
    """Replace the file atomically (a reader sees the old line or the new one, never half of one). The
    temporary files of writes a crash interrupted (kill -9 between open and rename) go first: one daemon
    per state dir, so none is another's write in progress."""
    path = os.path.join(state_dir, LISTEN_FILE)
    _remove_leftovers(state_dir)
    partial = f"{path}.{os.getpid()}.tmp"
    with open(partial, "w", encoding="ascii") as handle:
        handle.write(address + "\n")
    os.replace(partial, path)


def remove_listen_address(state_dir: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(state_dir, LISTEN_FILE))
    _remove_leftovers(state_dir)


def _remove_leftovers(state_dir: str) -> None:
    for leftover in glob.glob(glob.escape(os.path.join(state_dir, LISTEN_FILE)) + ".*.tmp"):
        with contextlib.suppress(OSError):
            os.unlink(leftover)


def read_listen_address(state_dir: str) -> str | None:
    """The address the daemon last said it listens on, or None (no file, unreadable, not one HOST:PORT)."""
    try:
        with open(os.path.join(state_dir, LISTEN_FILE), encoding="ascii") as handle:
            text = handle.read(256)
    except (OSError, ValueError):
        return None
    line = text.strip()
    host, sep, port = line.rpartition(":")
    return line if sep and host and port.isdigit() and "\n" not in line else None
