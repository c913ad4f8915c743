"""`tpu-watchdog demo`: the whole product on the embedded fake metadata server, narrated, in seconds.

A fake metadata server, a sample training job holding a simulated TPU device node, and the daemon (real
watches, real state file, real signals); then maintenance is announced and every step is shown, ending with
the checkpoint on disk, the daemon's status and a few metric lines. Everything lives in a temporary
directory and is cleaned up. The daemon here only ever considers the demo's own job: whatever else on this
machine holds a device with the same numbers is never signalled.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from watchdog.core.metadata_values import MaintenanceKind
from watchdog.core.stop import Stop
from watchdog.core.vocabulary import MAINTENANCE_EVENT, DaemonState
from watchdog.exitcodes import EXIT_DEMO_FAILED, EXIT_DEMO_NEEDS, EXIT_OK
from watchdog.host.holders import HolderScanner, ScanResult

TERMINATE = MaintenanceKind.TERMINATE_ON_HOST_MAINTENANCE.value
METRICS_SHOWN = (
    "tpu_watchdog_state{",
    "tpu_watchdog_maintenance_event{",
    "tpu_watchdog_signals_sent_total{",
    "tpu_watchdog_drains_total{",
    "tpu_watchdog_drain_duration_seconds_count",
    "tpu_watchdog_device_holders ",
)


def _importing_watchdog() -> dict[str, str]:
    """This environment, with the directory this `watchdog` package came from first on PYTHONPATH: the
    .deb keeps it in /usr/lib/tpu-watchdog, which only its launcher puts on sys.path, so a child
    `python3 -m watchdog.fake.trainer` would not find it otherwise."""
    home = str(Path(__file__).resolve().parents[2])
    paths = [home, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary directory (checkpoints, state)"
    )
    parser.add_argument(
        "--multihost", action="store_true",
        help="two simulated TPU hosts (PID namespaces) running one JAX + Orbax job; maintenance on one "
        "(needs root, unshare, jax and orbax-checkpoint: docs/multislice.md)",
    )  # fmt: skip


def say(text: str) -> None:
    sys.stdout.write(f"\n== {text}\n")
    sys.stdout.flush()


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the demo waited {timeout:.0f} s for {what}")
        time.sleep(0.05)


# The demo's device node carries /dev/full's numbers, which any process can open. sysfs says class mem (the
# kernel's own), never a TPU device, so the demo's daemons name it in devices.allow_numbers (and say so).
DEMO_NUMBER = (1, 7)
DEMO_ALLOW = "1:7"


def make_device(directory: Path) -> Path:
    """A character device node like /dev/accel0 (DEMO_NUMBER); a plain file if mknod is refused."""
    path = directory / "accel0"
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(*DEMO_NUMBER))
        sys.stdout.write(f"simulated TPU device: {path} (a character device node, like /dev/accel0)\n")
    except OSError as error:
        path.touch()
        sys.stdout.write(f"simulated TPU device: {path} (a plain file: mknod refused here: {error})\n")
    return path


class OnlyThese:
    """The real scanner, narrowed to the demo's own processes."""

    def __init__(self, inner: HolderScanner, pids: set[int]) -> None:
        self.inner, self.pids = inner, pids

    def scan(self) -> ScanResult:
        result = self.inner.scan()
        return dataclasses.replace(result, holders=tuple(h for h in result.holders if h.pid in self.pids))


def relay(stream: object, prefix: str) -> None:
    for line in iter(stream.readline, ""):  # type: ignore[attr-defined]
        sys.stdout.write(f"    {prefix} | {line}")
        sys.stdout.flush()


def run(args: argparse.Namespace) -> int:
    if args.multihost:
        return run_multihost(args)
    from watchdog.config.settings import default_config
    from watchdog.daemon.compose import Wiring, build_daemon
    from watchdog.daemon.status_text import render
    from watchdog.fake.server import FakeMetadataServer
    from watchdog.surface.httpapi import HttpSurface
    from watchdog.surface.notify import Notifier

    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("    daemon  | %(message)s"))
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.INFO)
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    logging.getLogger("watchdog.fake").setLevel(logging.WARNING)

    tmp = Path(tempfile.mkdtemp(prefix="tpu-watchdog-demo-"))
    stop = Stop()
    started = time.monotonic()
    trainer: subprocess.Popen[str] | None = None
    try:
        say("1. a fake GCE metadata server on loopback (the same one tests and rehearsals use)")
        fake = FakeMetadataServer(listen="127.0.0.1:0").start()
        sys.stdout.write(f"listening on {fake.address}: maintenance-event NONE, preempted FALSE\n")

        say("2. a training job holding the TPU (it checkpoints when SIGTERM arrives)")
        device = make_device(tmp)
        checkpoints = tmp / "checkpoints"
        trainer = subprocess.Popen(
            [sys.executable, "-m", "watchdog.fake.trainer", "--hold", str(device),
             "--checkpoint-dir", str(checkpoints), "--save-every", "100"],
            stdout=subprocess.PIPE, text=True, env=_importing_watchdog(),
        )  # fmt: skip
        threading.Thread(target=relay, args=(trainer.stdout, "trainer"), daemon=True).start()
        scanner = OnlyThese(
            HolderScanner(patterns=(str(device),), allow_numbers=[DEMO_NUMBER]), {trainer.pid}
        )
        job = trainer

        def holding() -> bool:
            if job.poll() is not None:
                raise RuntimeError(f"the sample job exited ({job.returncode}) before it held the device")
            return bool(scanner.scan().holders)

        wait_until(holding, 15, "the job to hold the device")

        say("3. the daemon: watching the metadata server, ready to drain")
        config = dataclasses.replace(
            default_config(),
            devices=(str(device),),
            allow_numbers=(DEMO_ALLOW,),
            state_dir=str(tmp / "state"),
            log_level="info",
        )
        wiring = Wiring(
            metadata_host=fake.address, timeout_sec=10, scanner=scanner, notifier=Notifier(environ={}),
            host_info=False,
        )  # fmt: skip
        built = build_daemon(config, stop, wiring)
        daemon, transport = built.daemon, built.transport
        http = HttpSurface("127.0.0.1:0", daemon.view)
        http.start()
        runner = threading.Thread(target=daemon.run, name="daemon", daemon=True)
        runner.start()
        wait_until(lambda: len(daemon.view.values) == 3, 15, "the daemon's first metadata reads")
        time.sleep(0.5)  # let the job write a few steps: the point is a checkpoint off its interval

        say(f"4. maintenance is announced: {MAINTENANCE_EVENT.source} = {TERMINATE}")
        fake.set(MAINTENANCE_EVENT.path, TERMINATE)
        drained = (DaemonState.DRAINED, DaemonState.TIMED_OUT)
        wait_until(lambda: daemon.view.lifecycle.state in drained, 60, "the drain")  # as /status shows it
        code = trainer.wait(timeout=10)

        say("5. the checkpoint the job saved on SIGTERM")
        saved = sorted(checkpoints.glob("checkpoint-*.json"))
        for path in saved:
            sys.stdout.write(f"{path.name}: {path.read_text().strip()}\n")
        on_sigterm = [p for p in saved if '"SIGTERM"' in p.read_text()]

        say("6. tpu-watchdog status")
        sys.stdout.write(render(daemon.view.status()))

        say(f"7. metrics (http://{http.address}/metrics)")
        with urllib.request.urlopen(f"http://{http.address}/metrics", timeout=5) as answer:
            for line in answer.read().decode().splitlines():
                if line.startswith(METRICS_SHOWN) and not line.endswith(" 0.0"):
                    sys.stdout.write(line + "\n")

        say(f"8. maintenance is over: {MAINTENANCE_EVENT.source} = {MaintenanceKind.NONE.value}")
        fake.set(MAINTENANCE_EVENT.path, MaintenanceKind.NONE.value)
        wait_until(lambda: daemon.view.lifecycle.state is DaemonState.IDLE, 30, "the daemon to go idle")
        sys.stdout.write("the daemon is idle again and ready for the next event\n")
        stop.set()
        runner.join(timeout=5)
        http.stop()
        transport.close()
        fake.stop()
        ok = code == 0 and bool(on_sigterm)
        say(
            f"{'done' if ok else 'FAILED'} in {time.monotonic() - started:.1f} s: the job exited {code} with "
            f"{'a checkpoint saved on SIGTERM' if on_sigterm else 'NO checkpoint saved on SIGTERM'}"
        )
        return EXIT_OK if ok else EXIT_DEMO_FAILED
    finally:
        stop.set()
        if trainer is not None and trainer.poll() is None:
            trainer.kill()
            trainer.wait(timeout=10)
        if args.keep:
            sys.stdout.write(f"kept {tmp}\n")
        else:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)


def run_multihost(args: argparse.Namespace) -> int:
    """Scenario (a) of tests/system/test_multihost.py, narrated: one job on two hosts, maintenance on one."""
    from watchdog.fake.hosts import Cluster, Job, missing

    why_not = missing()
    if why_not is not None:
        sys.stderr.write(f"tpu-watchdog demo --multihost cannot run here: {why_not}; then try again\n")
        return EXIT_DEMO_NEEDS
    tmp = Path(tempfile.mkdtemp(prefix="tpu-watchdog-demo-multihost-"))
    started = time.monotonic()
    job = Job(hosts=2)
    try:
        say("1. two simulated TPU hosts: each its own PID namespace and /proc, metadata server, device node "
            "and tpu-watchdog run")  # fmt: skip
        # make_device's numbers (/dev/full's) are safe here: each daemon sees only its own host's processes.
        config = f'[devices]\nallow_numbers = ["{DEMO_ALLOW}"]\n[drain]\nmaintenance_grace = 60\n'
        with Cluster(tmp, job, make_device, config) as hosts:
            for host in hosts.hosts:
                sys.stdout.write(f"{host.name}: metadata {host.fake.address}, device {host.device}\n")
            say(f"2. ONE JAX + Orbax job, a process per host (coordinator {hosts.coordinator}, a parameter "
                f"sharded over both, regular checkpoints every {job.save_interval} steps)")  # fmt: skip
            hosts.start().wait_watching()
            for host in hosts.hosts:
                sys.stdout.write(f"{host.name}: daemon http://{host.address}/status\n")
            sys.stdout.write("every process is training; each daemon sees its own process and nothing else\n")
            say(f"3. maintenance on host-1 ONLY: {MAINTENANCE_EVENT.source} = {TERMINATE}")
            event = time.time()
            hosts.hosts[1].fake.set(MAINTENANCE_EVENT.path, TERMINATE)
            exits = hosts.wait_exited(90)
            for host, end in zip(hosts.hosts, exits, strict=True):
                how = f"exited {end['code']}" if "code" in end else f"killed by signal {end['signal']}"
                sys.stdout.write(f"{host.name}'s process {how}, {end['at'] - event:.2f} s after the event\n")
            say("4. what each process saved (the same step, off the schedule: the sync point's)")
            reports = hosts.reports()
            for report in reports:
                sys.stdout.write(f"{json.dumps(report)}\n")
            say("5. host-1's daemon: SIGTERM to its process, then the drain ends `exited`")
            wait_until(lambda: "drain exited" in hosts.hosts[1].daemon_log.read_text(), 30, "host-1's drain")
            show_log(hosts.hosts[1].daemon_log, event)
            say("6. host-0's daemon: no event there, no signal sent; its holder left on its own")
            wait_until(lambda: "left on its own" in hosts.hosts[0].daemon_log.read_text(), 15, "host-0")
            show_log(hosts.hosts[0].daemon_log, event)
            for line in hosts.hosts[0].metrics().splitlines():
                if line.startswith(("tpu_watchdog_signals_sent_total{", "tpu_watchdog_holders_left_total")):
                    sys.stdout.write(line + "\n")
        steps = {r["step"] for r in reports if r is not None}
        ok = all(e.get("code") == 0 for e in exits) and None not in reports and len(steps) == 1
        say(f"{'done' if ok else 'FAILED'} in {time.monotonic() - started:.1f} s: "
            + (f"both processes saved step {steps.pop()} and exited 0" if ok else "see above"))  # fmt: skip
        return EXIT_OK if ok else EXIT_DEMO_FAILED
    finally:
        if args.keep:
            sys.stdout.write(f"kept {tmp}\n")
        else:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)


def show_log(path: Path, since: float) -> None:
    """The daemon's log lines from the event on (their ISO times are UTC)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(since))
    for line in path.read_text().splitlines():
        if line[:19] >= stamp:
            sys.stdout.write(f"    daemon  | {line}\n")
