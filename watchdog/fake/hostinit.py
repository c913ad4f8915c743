"""The init of one simulated TPU host: PID 1 of its own PID namespace (`unshare --pid --fork --mount-proc`).

`python -m watchdog.fake.hostinit SPEC` starts the host's job process, waits until it holds the host's
device node (as libtpu opens /dev/accel* at start), then starts the host's `tpu-watchdog run`: its first
scan sees the holder. The daemon's parent and PID 1 are never holders, so this init is neither. It reaps
every child (an init must) and tells the controller, one JSON line on stdout per fact, when each process
started and how the job process ended, at the wall-clock instant its exit was reaped. Closing its stdin
stops the host: SIGTERM to the daemon, SIGKILL to a job process still running, then exit. Stdlib only.

SPEC is a JSON object: {"job": [argv], "daemon": [argv], "device": path, "job_log": path, "daemon_log":
path}.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HOLD_WAIT = 120.0  # s for the job process to open the device (its Python start-up, before JAX)
STOP_WAIT = 20.0  # s for the daemon to stop once told


def say(fact: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({**fact, "at": time.time()}) + "\n")
    sys.stdout.flush()


def holds(pid: int, device: str) -> bool:
    """`pid` has an fd on `device` (the namespace's own /proc)."""
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == device:
                    return True
    return False


def decode(status: int) -> dict[str, int]:
    if os.WIFSIGNALED(status):
        return {"signal": os.WTERMSIG(status)}
    return {"code": os.waitstatus_to_exitcode(status)}


class Init:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.children: dict[int, str] = {}
        self.popens: list[subprocess.Popen[bytes]] = []  # kept: a collected Popen may reap its own child
        self.exited: dict[str, dict[str, int]] = {}
        self.lock = threading.Lock()

    def spawn(self, role: str, argv: list[str], log: str) -> int:
        with open(log, "ab") as out:
            child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        with self.lock:
            self.children[child.pid] = role
            self.popens.append(child)
        say({"started": role, "pid": child.pid})
        return child.pid

    def reap(self) -> None:
        """Every child that exits, orphans included; the roles' exits are told at once."""
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                if not self.children:
                    return
                time.sleep(0.01)  # a child about to be registered by spawn(): nothing to wait on yet
                continue
            with self.lock:
                role = self.children.pop(pid, None)
            if role is not None:
                self.exited[role] = decode(status)
                say({"exited": role, "pid": pid, **self.exited[role]})
                if role == "daemon":
                    return

    def kill(self, role: str, signum: int) -> None:
        with self.lock:
            pids = [pid for pid, r in self.children.items() if r == role]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def stop_when_told(self) -> None:
        sys.stdin.read()  # EOF: the controller is done with this host (or died)
        self.kill("job", signal.SIGKILL)
        self.kill("daemon", signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT
        while "daemon" not in self.exited and time.monotonic() < deadline:
            time.sleep(0.05)
        self.kill("daemon", signal.SIGKILL)

    def run(self) -> int:
        spec = self.spec
        reaper = threading.Thread(target=self.reap, daemon=True)
        job = self.spawn("job", spec["job"], spec["job_log"])
        reaper.start()
        deadline = time.monotonic() + HOLD_WAIT
        while not holds(job, spec["device"]):
            if "job" in self.exited or time.monotonic() > deadline:
                say({"error": f"the job process never held {spec['device']}: see {spec['job_log']}"})
                break
            time.sleep(0.02)
        else:
            say({"holding": "job", "pid": job})
        self.spawn("daemon", spec["daemon"], spec["daemon_log"])
        threading.Thread(target=self.stop_when_told, daemon=True).start()
        reaper.join()
        return 0


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    return Init(spec).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
