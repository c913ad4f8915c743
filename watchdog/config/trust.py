"""Who may choose what runs as root: the rule the loader applies to a file naming hooks and to each hook.

Hooks run as the daemon's user (root), so a path that anyone else can change (owner, or group/other write
permission) must not decide what runs. Here, not in surface/hooks.py, because the configuration applies it
while loading: config must not import the hook runner.
"""

from __future__ import annotations

import os
import shlex
import stat


def untrusted_because(path: str, st: os.stat_result | None = None, euid: int | None = None) -> str | None:
    """Why `path` must not decide what a daemon running as `euid` runs, with the fix; None when only root
    or `euid` itself can change it. `st` is os.stat(path) unless given (OSError if it cannot be read)."""
    st = os.stat(path) if st is None else st
    euid = os.geteuid() if euid is None else euid
    wrong, fixes = [], []
    if st.st_uid not in (0, euid):
        wrong.append(f"owned by uid {st.st_uid}")
        fixes.append(f"chown {'root' if euid == 0 else euid} {shlex.quote(path)}")
    writers = [who for who, bit in (("group", stat.S_IWGRP), ("other", stat.S_IWOTH)) if st.st_mode & bit]
    if writers:
        wrong.append("- and ".join(writers) + "-writable")
        fixes.append(f"chmod go-w {shlex.quote(path)}")
    if not wrong:
        return None
    return f"{path} is {' and '.join(wrong)} (fix: {' && '.join(fixes)})"


def refusal(path: str) -> str | None:
    """`untrusted_because(path)`, where a path that cannot be checked is refused too (with why)."""
    try:
        return untrusted_because(path)
    except FileNotFoundError:
        return f"{path} does not exist (install it, or correct the path)"
    except OSError as error:
        return f"{path} cannot be checked ({error.strerror})"
