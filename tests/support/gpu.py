"""A stand-in GPU host: device nodes named like NVIDIA's, and real processes named like its agents.

No GPU here: the nodes are `UniqueDevice`s (numbers nothing else holds, no driver) under a test's directory,
named nvidia0, nvidia1 (the GPUs), nvidiactl, nvidia-uvm and nvidia-caps/nvidia-cap1 (what every CUDA
process also opens). A holder is a copy of `sleep` named as it should be seen (nvidia-persistenced, a job's
name): exec'd by a launcher that opened the nodes with O_PATH, so its /proc/PID/exe and comm are that name
and the fds are on the nodes, as a real agent's are. SIGTERM's default action ends it: one that is still
running after a drain was never signalled.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from tests.support.waiting import wait_for
from tests.support.workloads import UniqueDevice
from watchdog.core.process import Holder

GPU_NAMES = ("nvidia0", "nvidia1")
SHARED_NAMES = ("nvidiactl", "nvidia-uvm", "nvidia-caps/nvidia-cap1")
LAUNCH = (
    "import os, sys\n"
    "for path in sys.argv[2:]:\n"
    "    os.set_inheritable(os.open(path, os.O_PATH), True)\n"
    "os.execv(sys.argv[1], [os.path.basename(sys.argv[1]), '600'])\n"
)


class StandInGpuHost:
    """The nodes of a two-GPU host under `directory`, and the processes holding them."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        (directory / "nvidia-caps").mkdir(parents=True, exist_ok=True)
        self._bin = directory / "bin"
        self._bin.mkdir(exist_ok=True)
        self.nodes = {name: UniqueDevice(directory, name) for name in (*GPU_NAMES, *SHARED_NAMES)}
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def pattern(self) -> str:
        """The GPU profile's pattern for these nodes, as broad as `/dev/nvidia*`: shared ones match too."""
        return str(self.directory / "nvidia*")

    def path(self, name: str) -> str:
        return str(self.nodes[name].path)

    def hold(self, exe_name: str, *names: str) -> subprocess.Popen[bytes]:
        """A running copy of `sleep` called `exe_name`, holding the named nodes."""
        exe = self._bin / exe_name
        if not exe.exists():
            shutil.copy(shutil.which("sleep") or "/bin/sleep", exe)
        process = subprocess.Popen([sys.executable, "-c", LAUNCH, str(exe), *map(self.path, names)])
        self.processes.append(process)
        wait_for(lambda: _execd(process.pid, exe_name), what=f"pid {process.pid} exec'ing {exe_name}")
        return process

    def close(self) -> None:
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGKILL)
            process.wait()
        for node in self.nodes.values():
            node.close()

    def __enter__(self) -> StandInGpuHost:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _execd(pid: int, name: str) -> bool:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")) == name
    except OSError:
        return False


def running(process: subprocess.Popen[bytes]) -> bool:
    return process.poll() is None


class OnlyPids:
    """The daemon's own production scanner (its profile's patterns and agents), narrowed to the test's
    processes: nothing else on the machine is ever signalled, and the agent rule is the real one."""

    def __init__(self, inner: Any, pids: Collection[int]) -> None:
        self.inner, self.pids = inner, frozenset(pids)

    def scan(self) -> Any:
        result = self.inner.scan()
        return dataclasses.replace(
            result,
            holders=tuple(h for h in result.holders if h.pid in self.pids),
            agents=tuple(a for a in result.agents if a.pid in self.pids),
        )

    def recheck(self, holders: Sequence[Holder]) -> list[Holder]:
        return [h for h in self.inner.recheck(holders) if h.pid in self.pids]
