"""A real systemd manager for the unit tests: systemd-nspawn boots this machine's own /usr, volatile.

The container gets a private network (so fixed loopback ports are free), the checkout, the venv and the
interpreter it links to (read-only, at the same paths: the venv's scripts name them), and a device dir.
Commands run inside with `nsenter -a` into the container's PID 1.

The container's manager must never take over the host's root cgroup. Where the host runs no systemd (PID 1
here is something else) nspawn is started in a cgroup of its own, made by hand in every mounted hierarchy,
and told to keep it (--keep-unit). Under a host systemd, `systemd-run --scope` gives it a scope instead.
Everything is undone in `close()`: the container stopped (SIGTERM to nspawn), its cgroups removed, and
what nspawn leaves under /run/systemd (when no other container uses it).

Boots and that clean-up take turns, across processes (a lock file): nspawn mounts the root on
/run/systemd/nspawn-root, a directory that looks empty on the host while a container uses it, so another
container's clean-up could remove it between nspawn's mkdir and its mount ("Failed to mount
/run/systemd/nspawn-root/usr ... No such file or directory", seen with the .deb's and the unit's containers
booting side by side in `make test`).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from tests.support.waiting import wait_for

NSPAWN = "systemd-nspawn"
CGROUP_ROOT = Path("/sys/fs/cgroup")
NSPAWN_RUNTIME = Path("/run/systemd/nspawn")
BOOT_TIMEOUT = 30.0
HOST_MOUNTS_LOCK = Path("/run/lock/tpuwd-test-nspawn.lock")


@contextlib.contextmanager
def host_mounts_turn() -> Iterator[None]:
    """This process's turn to boot a container or clean up after one (see the module's docstring)."""
    HOST_MOUNTS_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(HOST_MOUNTS_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield  # the lock goes with the file's close


def why_not() -> str | None:
    """Why a container cannot run here, or None if it can."""
    if os.geteuid() != 0:
        return "systemd-nspawn needs root"
    for tool in (NSPAWN, "nsenter", "pgrep"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (apt-get install systemd-container util-linux procps)"
    if not Path("/usr/lib/systemd/systemd").exists():
        return "no /usr/lib/systemd/systemd to boot"
    return None


def host_runs_systemd() -> bool:
    """sd_booted(3): the host's PID 1 is systemd."""
    return Path("/run/systemd/system").is_dir()


def _own_cgroups(name: str) -> list[Path]:
    """A new cgroup `name` under our current one in every hierarchy nspawn uses (the named systemd v1
    hierarchy and cgroup2, whichever are mounted)."""
    current: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        current[controllers] = path
    mounts = []
    if (CGROUP_ROOT / "cgroup.procs").exists():  # pure cgroup2 at /sys/fs/cgroup
        mounts.append((CGROUP_ROOT, current.get("", "/")))
    else:
        for sub, key in (("systemd", "name=systemd"), ("unified", "")):
            if (CGROUP_ROOT / sub / "cgroup.procs").exists():
                mounts.append((CGROUP_ROOT / sub, current.get(key, "/")))
    made = []
    for mount, path in mounts:
        group = mount / path.lstrip("/") / name
        group.mkdir()
        made.append(group)
    return made


def _kill_leftovers(group: Path) -> None:
    """SIGKILL every process still in the cgroup tree `group` (ours: made for one container)."""
    if not group.exists():
        return
    for procs in group.rglob("cgroup.procs"):
        for pid in procs.read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


def _remove_cgroup(group: Path) -> None:
    """rmdir a cgroup tree bottom-up, once its processes are gone."""
    if not group.exists():
        return
    children = sorted((p for p in group.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
    for path in [*children, group]:
        procs = path / "cgroup.procs"
        wait_for(functools.partial(_is_empty, procs), 10, 0.05, f"{procs} empty")
        path.rmdir()


def _is_empty(procs: Path) -> bool:
    return not procs.read_text().strip()


class Container:
    """One booted container; `run()` executes a command inside it."""

    def __init__(self, binds: list[tuple[str, str]], log_path: Path) -> None:
        self.name = f"tpuwd-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._cgroups: list[Path] = []
        self._scope = ""
        self._log: IO[bytes] = open(log_path, "wb")  # noqa: SIM115 - closed in close()
        self.log_path = log_path
        self._nspawn: subprocess.Popen[bytes] | None = None
        self.pid = 0
        try:
            with host_mounts_turn():
                self._boot(binds)
        except BaseException:
            self.close()
            raise

    def _boot(self, binds: list[tuple[str, str]]) -> None:
        argv = [
            NSPAWN,
            "--directory=/",
            "--volatile=yes",
            "--private-network",
            "--register=no",
            f"--machine={self.name}",
            "--boot",
            "--console=read-only",
            *(f"--bind-ro={source}:{target}" for source, target in binds),
            "systemd.mask=systemd-firstboot.service",
            "systemd.unit=basic.target",
        ]
        if host_runs_systemd():  # a scope of its own from the host's manager (private socket, no D-Bus)
            self._scope = f"{self.name}.scope"
            command = ["systemd-run", "--scope", "--quiet", f"--unit={self._scope}", NSPAWN, "--keep-unit"]
            command += argv[1:]
        else:
            self._cgroups = _own_cgroups(self.name)
            join = "; ".join(f'echo $$ > "{group}/cgroup.procs"' for group in self._cgroups)
            command = ["/bin/sh", "-c", f'{join}; exec "$@"', "sh", NSPAWN, "--keep-unit", *argv[1:]]
        self._nspawn = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT
        )
        self.pid = int(wait_for(self._find_init, BOOT_TIMEOUT, 0.05, "the container's systemd"))
        # Until the manager is up, systemctl answers nothing ("not booted with systemd"), then --wait waits.
        state = wait_for(self._system_state, BOOT_TIMEOUT, 0.05, "the container's manager to answer")
        assert state in ("running", "degraded"), f"boot ended {state!r}:{self.boot_log()}"

    def _system_state(self) -> str:
        answer = self.run("systemctl", "is-system-running", "--wait", timeout=BOOT_TIMEOUT, check=False)
        state = answer.stdout.strip()
        return "" if state == "offline" else state  # offline: the manager is not on the bus yet

    def _find_init(self) -> str:
        assert self._nspawn is not None
        if self._nspawn.poll() is not None:
            raise AssertionError(f"systemd-nspawn exited {self._nspawn.returncode}:{self.boot_log()}")
        found = subprocess.run(
            ["pgrep", "-P", str(self._nspawn.pid), "-x", "systemd"],
            capture_output=True,
            text=True,
            check=False,
        )
        return found.stdout.strip()

    def boot_log(self) -> str:
        self._log.flush()
        return "\n" + self.log_path.read_text(errors="replace")[-3000:]

    def run(
        self, *argv: str, timeout: float = 30, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run `argv` inside the container (all its namespaces, as root); check=True fails on rc != 0."""
        result = subprocess.run(
            ["nsenter", "-t", str(self.pid), "-a", *argv],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"{argv} -> rc {result.returncode}\n{result.stdout}\n{result.stderr}")
        return result

    def write(self, path: str, text: str) -> None:
        self.run("/bin/sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "sh", path, stdin=text)

    def close(self) -> None:
        """Stop the container and undo what booting it left on the host. Safe to call twice."""
        with host_mounts_turn():  # nspawn's exit and the rmdirs below: never beside a boot
            self._close()

    def _close(self) -> None:
        if self._nspawn is not None:
            if self._nspawn.poll() is None:
                self._nspawn.send_signal(signal.SIGTERM)  # nspawn asks the container to power off
                try:
                    self._nspawn.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    self._nspawn.kill()
                    self._nspawn.wait(timeout=10)
            self._nspawn = None
        # A manager still early in its boot ignores the power-off signal, and outlives nspawn: what is left
        # in our own cgroups is the container's, so it is killed (by pid) before the cgroups are removed.
        for group in self._cgroups:
            _kill_leftovers(group)
        if self._scope:
            subprocess.run(["systemctl", "stop", self._scope], capture_output=True, timeout=30, check=False)
            self._scope = ""
        for group in self._cgroups:
            _remove_cgroup(group)
        self._cgroups = []
        # nspawn leaves its propagation dir and, with --volatile, an empty mount point for the root behind.
        shutil.rmtree(NSPAWN_RUNTIME / "propagate" / self.name, ignore_errors=True)
        volatile_root = NSPAWN_RUNTIME.with_name("nspawn-root")
        for leftover in (NSPAWN_RUNTIME / "propagate", NSPAWN_RUNTIME, volatile_root):
            with contextlib.suppress(OSError):
                leftover.rmdir()  # only if empty: another container may be using it
        if not self._log.closed:
            self._log.close()


def binds_for_checkout(repo: Path, device_dir: Path, device_target: str) -> list[tuple[str, str]]:
    """What the unit needs visible inside: the checkout, the venv, the interpreter (same paths), devices."""
    paths = {str(repo), sys.prefix, sys.base_prefix}
    for path in sorted(paths):
        if (
            path == "/usr"
            or path.startswith("/usr/")
            or any(other != path and path.startswith(other.rstrip("/") + "/") for other in paths)
        ):
            paths.discard(path)  # /usr is there already; a path inside another bind comes with it
    return [(path, path) for path in sorted(paths)] + [(str(device_dir), device_target)]
