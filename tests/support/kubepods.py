"""A real cgroup laid out the way the kubelet lays out a pod's container (systemd driver), for a real process.

`kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/cri-containerd-<64 hex>.scope`,
made in the cgroup2 hierarchy (here: beside v1's controllers, at /sys/fs/cgroup/unified; on a pure cgroup2
host, /sys/fs/cgroup) under a directory of its own below this process's cgroup, so two runs never share one
and no other process's cgroup is touched. `close()` moves the processes back and removes the directories.
"""

from __future__ import annotations

import contextlib
import secrets
import uuid
from pathlib import Path

import pytest

MOUNTS = Path("/proc/self/mounts")


def cgroup2_mount() -> Path | None:
    for line in MOUNTS.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


def own_cgroup2() -> str:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return line[3:]
    return "/"


class KubepodsCgroup:
    """A pod's container cgroup of a fresh pod uid and container id; `enter(pid)` moves a process into it."""

    def __init__(self) -> None:
        mount = cgroup2_mount()
        if mount is None:
            pytest.skip("no cgroup2 hierarchy mounted here")
        self.home = mount / own_cgroup2().lstrip("/")
        self.pod_uid = str(uuid.uuid4())
        self.container_id = secrets.token_hex(32)
        pod = f"kubepods-burstable-pod{self.pod_uid.replace('-', '_')}.slice"
        self.top = self.home / f"tpu-watchdog-test-{secrets.token_hex(4)}"
        self.scope = self.top / "kubepods.slice" / "kubepods-burstable.slice" / pod
        self.scope = self.scope / f"cri-containerd-{self.container_id}.scope"
        try:
            self.scope.mkdir(parents=True)
        except OSError as exc:
            self._remove()
            pytest.skip(f"cannot make a cgroup in {self.home} ({exc}): needs root and a writable cgroup2")
        self.path = "/" + str(self.scope.relative_to(mount))  # as /proc/PID/cgroup shows it

    def enter(self, pid: int) -> None:
        (self.scope / "cgroup.procs").write_text(f"{pid}\n")

    def close(self) -> None:
        """Move whatever is still in the scope back home, then remove the tree bottom-up."""
        procs = self.scope / "cgroup.procs"
        with contextlib.suppress(OSError):
            for pid in procs.read_text().split():
                with contextlib.suppress(OSError):  # it exited meanwhile
                    (self.home / "cgroup.procs").write_text(f"{pid}\n")
        self._remove()

    def _remove(self) -> None:
        path = self.scope
        while path != self.home and self.top in (path, *path.parents):
            with contextlib.suppress(FileNotFoundError):
                path.rmdir()
            path = path.parent

    def __enter__(self) -> KubepodsCgroup:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
