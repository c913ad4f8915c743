"""A fixture /proc tree in a temp dir: pid dirs with stat, status, cmdline and cgroup files and fd/ symlinks.

Lets tests give the scanner exactly the processes they need (odd names, zombies, kernel threads, missing
files) without depending on what else runs on the machine. The fd links point at real paths in the test's
temp dir, so stat() through them reaches real files and real device nodes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

BOOT_TIME = 1_700_000_000  # the fixture machine booted at this wall-clock second


def stat_line(
    pid: int, name: str, state: str = "S", ppid: int = 1, flags: int = 0, start_time: int = 1000
) -> str:
    """A /proc/PID/stat line with 52 fields, the ones the scanner reads set from the arguments."""
    fields = [state, str(ppid), str(pid), str(pid), "0", "-1", str(flags)]  # fields 3..9
    fields += ["0"] * 12  # fields 10..21
    fields += [str(start_time)]  # field 22
    fields += ["0"] * 30  # fields 23..52
    return f"{pid} ({name}) {' '.join(fields)}\n"


class ProcTree:
    """Builds pid directories under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        (root / "self").symlink_to("1")  # like the real thing: non-numeric entries are not processes
        (root / "sys").mkdir()
        (root / "stat").write_text(f"cpu  0 0 0 0\nbtime {BOOT_TIME}\n")  # psutil's start times count from it

    def add(
        self,
        pid: int,
        name: str = "python3",
        *,
        state: str = "S",
        ppid: int = 1,
        flags: int = 0,
        start_time: int = 1000,
        uid: int = 0,
        cmdline: Sequence[str] = ("python3", "train.py"),
        cgroup: str = "0::/user.slice/user-0.slice/session-1.scope\n",
        fds: Mapping[int, str] | None = None,
        omit: Sequence[str] = (),
        signals: tuple[int, int] | None = None,
    ) -> Path:
        """One process. `fds` maps fd numbers to link targets ("/dev/accel0", "socket:[12]"); `omit` names
        files to leave out (as if the process exited between reads); `signals` the (SigIgn, SigCgt) masks
        of its status (None: no such lines, as no real kernel would write)."""
        pid_dir = self.root / str(pid)
        (pid_dir / "fd").mkdir(parents=True)
        masks = "" if signals is None else f"SigIgn:\t{signals[0]:016x}\nSigCgt:\t{signals[1]:016x}\n"
        files = {
            "stat": stat_line(pid, name, state, ppid, flags, start_time),
            "status": f"Name:\t{name}\nState:\t{state}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t0\t0\t0\t0\n"
            + masks,
            "cgroup": cgroup,
        }
        for file_name, text in files.items():
            if file_name not in omit:
                (pid_dir / file_name).write_text(text)
        if "cmdline" not in omit:
            (pid_dir / "cmdline").write_bytes(b"".join(arg.encode() + b"\0" for arg in cmdline))
        for fd, target in (fds or {}).items():
            os.symlink(target, pid_dir / "fd" / str(fd))
        return pid_dir
