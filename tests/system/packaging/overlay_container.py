"""A throwaway root for installing packages for real: tests/systemd's container (systemd-nspawn booting this
machine's own OS), but the whole root through an overlay, not only /usr, so the host's /etc and dpkg
database are there and dpkg may write anywhere: into a tmpfs, gone when the container stops."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

from tests.support.container import (
    BOOT_TIMEOUT,
    NSPAWN,
    NSPAWN_RUNTIME,
    Container,
    _own_cgroups,
    host_runs_systemd,
)
from tests.support.waiting import wait_for


class OverlayContainer(Container):
    """tests/systemd's container, booting this machine's whole root through an overlay instead of only /usr:
    the host's /etc and dpkg database are there, and dpkg may write anywhere, into a tmpfs.

    nspawn refuses --volatile=overlay for the root directory itself, so the overlay is made by hand, in a
    private mount namespace that only nspawn lives in (lower: /, upper: a tmpfs on `scratch`): every mount
    and every write is gone when the container stops. Only the command line differs from Container._boot.
    """

    scratch: Path

    def __init__(self, binds: list[tuple[str, str]], scratch: Path, log_path: Path) -> None:
        self.scratch = scratch
        super().__init__(binds, log_path)

    def _boot(self, binds: list[tuple[str, str]]) -> None:
        root = self.scratch / "root"
        overlay = (
            'set -e; mount -t tmpfs -o mode=0755 tpuwd-deb "$0"; mkdir "$0/upper" "$0/work" "$0/root"; '
            'mount -t overlay -o "lowerdir=/,upperdir=$0/upper,workdir=$0/work" tpuwd-deb "$0/root"; '
            'exec "$@"'
        )
        nspawn = [
            NSPAWN,
            f"--directory={root}",
            "--private-network",
            "--register=no",
            f"--machine={self.name}",
            "--boot",
            "--console=read-only",
            *(f"--bind-ro={source}:{target}" for source, target in binds),
            "systemd.mask=systemd-firstboot.service",
            "systemd.unit=basic.target",
        ]
        if not host_runs_systemd():
            self._cgroups = _own_cgroups(self.name)
            nspawn.insert(1, "--keep-unit")
        command = ["unshare", "--mount", "--propagation=private", "/bin/sh", "-c", overlay, str(self.scratch)]
        command += nspawn
        if self._cgroups:
            join = "; ".join(f'echo $$ > "{group}/cgroup.procs"' for group in self._cgroups)
            command = ["/bin/sh", "-c", f'{join}; exec "$@"', "sh", *command]
        # Every step execs the next: the process started here is nspawn itself, as Container expects.
        self._nspawn = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT
        )
        self.pid = int(wait_for(self._find_init, BOOT_TIMEOUT, 0.05, "the container's systemd"))
        state = wait_for(self._system_state, BOOT_TIMEOUT, 0.05, "the container's manager to answer")
        assert state in ("running", "degraded"), f"boot ended {state!r}:{self.boot_log()}"

    def _close(self) -> None:
        """Container's clean-up (in its turn), and the lock directory nspawn makes for a --directory other
        than / (when empty: another container may hold a lock there)."""
        super()._close()
        for leftover in (NSPAWN_RUNTIME / "locks", NSPAWN_RUNTIME):
            with contextlib.suppress(OSError):
                leftover.rmdir()
