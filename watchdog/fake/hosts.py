"""N simulated TPU hosts on one machine, running ONE multi-process job: what Multislice looks like to the
daemons, with nothing simulated but the TPU itself.

Each `SimulatedHost` is a PID namespace of its own with its own /proc (`unshare --pid --fork --mount-proc
--kill-child`, init `watchdog/fake/hostinit.py`), so its `tpu-watchdog run` sees and can signal only that
host's processes; its own fake metadata server (loopback, a port of its own, in this process, so the
controller sets its values directly); its own state directory and device node; and one process of the job
(`Job`: by default examples/multihost_trainer.py, JAX on CPU with Orbax). All share the loopback network,
so the job's processes reach their coordinator (process 0) as they would across hosts.

Used by tests/system/test_multihost.py, bench/bench_multihost.py and `tpu-watchdog demo --multihost`.
Needs root (a PID namespace) and unshare(1). Stdlib only, like the rest of watchdog.fake.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from watchdog.fake.listen import hold_port
from watchdog.fake.server import FakeMetadataServer
from watchdog.fake.vm_identity import TpuIdentity

UNSHARE = ("unshare", "--pid", "--fork", "--mount-proc", "--kill-child")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TRAINER = EXAMPLES / "multihost_trainer.py"  # in a checkout; the .deb ships no examples
MakeDevice = Callable[[Path], Path]  # a directory -> a device node made in it


def missing() -> str | None:
    """What this machine lacks to run simulated hosts with the default job, in words; None: nothing."""
    import importlib.util
    import shutil

    lacking = [name for name in ("jax", "orbax") if importlib.util.find_spec(name) is None]
    if lacking:
        verb = "are" if len(lacking) > 1 else "is"
        return f"the job is a real JAX + Orbax job, and {' and '.join(lacking)} {verb} not installed for " \
            f"{sys.executable}: `{sys.executable} -m pip install jax orbax-checkpoint` (in a checkout, " \
            "`make setup` does it)"  # fmt: skip
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return "each simulated host is a PID namespace: it needs root and unshare(1) (util-linux)"
    if not TRAINER.is_file():
        return f"the job is {TRAINER}, which only a checkout has"
    return None


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment, with this `watchdog` first on PYTHONPATH (the hosts' daemons run it) and JAX on
    CPU."""
    home = str(Path(__file__).resolve().parents[2])
    paths = [home, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "JAX_PLATFORMS": "cpu", **(extra or {})}


@dataclass(frozen=True)
class Job:
    """One multi-process job, a process per host: a script taking examples/multihost_trainer.py's flags."""

    hosts: int
    slices: int = 1
    save_interval: int = 1000
    trainer: Path = TRAINER
    extra: tuple[str, ...] = ()

    def argv(self, python: str, host: SimulatedHost, coordinator: str, checkpoints: Path) -> list[str]:
        return [
            python, str(self.trainer), "--coordinator", coordinator, "--num-processes", str(self.hosts),
            "--process-id", str(host.index), "--slices", str(self.slices), "--checkpoint-dir",
            str(checkpoints), "--save-interval", str(self.save_interval), "--hold", str(host.device),
            "--ready", str(host.ready_file), "--report", str(host.report_file), *self.extra,
        ]  # fmt: skip


def tpu_identity(index: int, job: Job, coordinator: str) -> TpuIdentity:
    """Host `index` of `job` as a TPU VM of it (slice-major, as Multislice numbers workers): each slice a node
    of its own, each host its worker number, instance id and name; on Multislice the job's coordinator."""
    per_slice = job.hosts // job.slices
    slice_id, worker = divmod(index, per_slice)
    multislice = job.slices > 1
    return TpuIdentity(
        accelerator_type=f"v5litepod-{4 * per_slice}", node=f"fake-slice-{slice_id}", worker=worker,
        hosts=per_slice, zone="us-west4-a", slice_id=slice_id if multislice else None,
        num_slices=job.slices if multislice else None, coordinator=coordinator if multislice else "",
    )  # fmt: skip


@dataclass
class SimulatedHost:
    """One TPU VM: a PID namespace with the job's process and the host's daemon, and a fake of its own."""

    index: int
    directory: Path
    device: Path
    fake: FakeMetadataServer
    facts: list[dict[str, Any]] = field(default_factory=list)
    process: subprocess.Popen[str] | None = None
    changed: threading.Condition = field(default_factory=threading.Condition)
    _reader: threading.Thread = field(default_factory=threading.Thread)

    @property
    def name(self) -> str:
        return f"host-{self.index}"

    @property
    def ready_file(self) -> Path:
        return self.directory / "ready"

    @property
    def report_file(self) -> Path:
        return self.directory / "report.json"

    @property
    def job_log(self) -> Path:
        return self.directory / "job.log"

    @property
    def daemon_log(self) -> Path:
        return self.directory / "daemon.log"

    def start(self, python: str, job_argv: list[str], config: Path, env: dict[str, str]) -> None:
        daemon = [
            python, "-m", "watchdog", "run", "--config", str(config), "--metadata-host", self.fake.address,
            "--device", str(self.device), "--state-dir", str(self.directory / "state"),
            "--listen", "127.0.0.1:0", "--metadata-timeout-sec", "5",
        ]  # fmt: skip
        spec = {"job": job_argv, "daemon": daemon, "device": str(self.device), "job_log": str(self.job_log),
                "daemon_log": str(self.daemon_log)}  # fmt: skip
        (self.directory / "spec.json").write_text(json.dumps(spec))
        self.process = subprocess.Popen(
            [*UNSHARE, python, "-m", "watchdog.fake.hostinit", str(self.directory / "spec.json")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, name=f"{self.name}-facts", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        stdout = self.process.stdout if self.process is not None else None
        for line in stdout or ():
            with contextlib.suppress(ValueError), self.changed:
                self.facts.append(json.loads(line))
                self.changed.notify_all()
        with self.changed:
            self.facts.append({"init_ended": True, "at": time.time()})
            self.changed.notify_all()

    def fact(self, key: str, value: str | None = None) -> dict[str, Any] | None:
        """The first fact with `key` (equal to `value` if given), e.g. fact("exited", "job")."""
        with self.changed:
            return next((f for f in self.facts if key in f and value in (None, f[key])), None)

    def wait_fact(self, key: str, value: str | None, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self.changed:
            while (found := self.fact(key, value)) is None:
                left = deadline - time.monotonic()
                if left <= 0 or self.fact("init_ended") is not None:
                    raise TimeoutError(f"{self.name}: no {key}={value} within {timeout:.0f} s ({self.facts})")
                self.changed.wait(min(left, 0.5))
            return found

    @property
    def job_exit(self) -> dict[str, Any] | None:
        """{"code": N} or {"signal": N} once the job process exited, with "at" (wall clock) when."""
        return self.fact("exited", "job")

    @property
    def address(self) -> str | None:
        """Where the daemon listens, `HOST:PORT`, from the file it writes in its state dir once it has bound
        (`STATE_DIR/listen`, watchdog/store/address.py), or None before that. The daemon binds port 0 and
        says which it got: a port picked here and freed before the daemon binds it could be taken by another
        host's fake metadata server in between."""
        try:
            line = (self.directory / "state" / "listen").read_text(encoding="ascii").strip()
        except OSError:
            return None
        return line if line.rpartition(":")[2].isdigit() else None

    def status(self) -> dict[str, Any] | None:
        """The daemon's /status, or None while it is not answering."""
        address = self.address
        if address is None:
            return None
        try:
            with urllib.request.urlopen(f"http://{address}/status", timeout=5) as answer:
                data: dict[str, Any] = json.loads(answer.read())
                return data
        except (OSError, ValueError):
            return None

    def metrics(self) -> str:
        if self.address is None:
            raise ConnectionError(f"{self.name}: the daemon has not said where it listens (STATE_DIR/listen)")
        with urllib.request.urlopen(f"http://{self.address}/metrics", timeout=5) as answer:
            text: str = answer.read().decode()
            return text

    def inside(
        self, argv: list[str], timeout: float, env: dict[str, str]
    ) -> subprocess.CompletedProcess[str]:
        """Run `argv` on this host: in its PID and mount namespaces (its /proc), as an SRE's shell there."""
        if self.process is None:
            raise RuntimeError(f"{self.name} is not started")
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        return subprocess.run(
            ["nsenter", "--target", children[0], "--pid", "--mount", *argv],
            capture_output=True, text=True, timeout=timeout, check=False, env=env,
        )  # fmt: skip

    def watching(self) -> bool:
        """The daemon is up, has heard every watched key, and has seen the job's process hold the device."""
        status = self.status()
        return status is not None and len(status["metadata"]) == 3 and len(status["holders"]) == 1

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the daemon (SIGTERM), kill the job process if still running, end the namespace."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(OSError, AttributeError):  # no stdin: never started
                self.process.stdin.close()  # type: ignore[union-attr]
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()  # --kill-child: the kernel kills the rest of the namespace
                self.process.wait(timeout=timeout)
        if self.process is not None and self.process.stdout is not None:
            self._reader.join(timeout=timeout)
            self.process.stdout.close()
        self.fake.stop()


class Cluster:
    """`job.hosts` simulated hosts running `job`; a context manager that stops them all."""

    def __init__(
        self, work: Path, job: Job, make_device: MakeDevice, config: str = "", python: str = sys.executable,
        env: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.work, self.job, self.python = work, job, python
        self.env = env if env is not None else child_env()
        work.mkdir(parents=True, exist_ok=True)
        self.config = work / "config.toml"
        self.config.write_text(config)
        self.checkpoints = work / "checkpoints"
        # Held until the cluster stops: the job's process 0 binds it, and no daemon's port 0 is given it.
        self._coordinator_port = hold_port()
        self.coordinator = f"127.0.0.1:{self._coordinator_port.getsockname()[1]}"
        self.hosts: list[SimulatedHost] = []
        for index in range(job.hosts):
            directory = work / f"host-{index}"
            directory.mkdir(parents=True)
            fake = FakeMetadataServer(listen="127.0.0.1:0").start()
            fake.set_identity(tpu_identity(index, job, self.coordinator))
            self.hosts.append(SimulatedHost(index, directory, make_device(directory), fake))

    def start(self) -> Cluster:
        for host in self.hosts:
            argv = self.job.argv(self.python, host, self.coordinator, self.checkpoints)
            host.start(self.python, argv, self.config, self.env)
        return self

    def wait_watching(self, timeout: float = 120.0) -> None:
        """Every process has run a few steps (the job is up) and every daemon watches its holder."""
        deadline = time.monotonic() + timeout
        for host in self.hosts:
            while not (host.ready_file.exists() and host.watching()):
                if host.job_exit is not None or host.fact("error") is not None:
                    raise RuntimeError(f"{host.name}: {host.facts}; job log:\n{self.tail(host.job_log)}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{host.name} not up in {timeout:.0f} s: {host.facts}")
                time.sleep(0.05)

    def wait_exited(self, timeout: float) -> list[dict[str, Any]]:
        """Every job process's exit ({"code"|"signal", "at"}), in host order."""
        return [host.wait_fact("exited", "job", timeout) for host in self.hosts]

    def reports(self) -> list[dict[str, Any] | None]:
        """What each process wrote about how it ended (None: it wrote nothing, e.g. it was killed)."""
        return [json.loads(h.report_file.read_text()) if h.report_file.exists() else None for h in self.hosts]

    @staticmethod
    def tail(path: Path, size: int = 3000) -> str:
        return path.read_text(errors="replace")[-size:] if path.exists() else f"({path}: none)"

    def logs(self) -> str:
        """Every host's facts, job log and daemon log (tails): what a failure report needs."""
        parts = []
        for host in self.hosts:
            parts += [f"== {host.name} facts: {host.facts}", f"-- job:\n{self.tail(host.job_log)}",
                      f"-- daemon:\n{self.tail(host.daemon_log)}"]  # fmt: skip
        return "\n".join(parts)

    def stop(self) -> None:
        for host in self.hosts:
            host.stop()
        self._coordinator_port.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


@contextlib.contextmanager
def cluster(work: Path, job: Job, make_device: MakeDevice, config: str = "") -> Iterator[Cluster]:
    """A started `Cluster` whose every daemon watches its holder; stopped on the way out."""
    with Cluster(work, job, make_device, config) as hosts:
        hosts.start().wait_watching()
        yield hosts
