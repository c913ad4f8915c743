"""PID 1 of a private PID and network namespace: a fake metadata server, a daemon, and a framework under it.

`python -m tests.support.framework_driver PLAN.json` runs the plan's runs one after the other under one
daemon; each run is a framework's trainer (tests/support/maxtext_launcher.py or pax_launcher.py, in that
framework's venv) holding the test's device node. Once a run is where the plan says (trained some steps, or
only imported), the fake
starts the plan's event; the driver waits for the run to exit and for the daemon's drain to end, then
reaps the run, clears the event and writes what it saw to the plan's `result` file.

The network namespace is for the JAX coordinator: MaxText's on CPU binds port 1234 on every interface, so
two runs on one machine (another test, another engineer's run) would clash. Its loopback is brought up here.
The driver does not reap a run before the daemon's drain has ended: the daemon reads a non-child's exit
status from /proc while it is a zombie, as it would from a job whose launcher is slow to reap it.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.readable import readable
from tests.support.waiting import wait_for
from watchdog.fake.server import FakeMetadataServer

# A preemption's grace, longer than the platform's 25 s: on 2 cores at load 20, MaxText took 22-26 s from
# SIGTERM to exit, its checkpoint committed after 1-3 s of it and the rest the interpreter's teardown (2 GB
# of modules); 25 s is not a bound this machine can keep. The maintenance grace stays the default 300 s.
PREEMPT_GRACE = "120"
TRAILING_NUMBER = re.compile(r"(\d+)$")  # a checkpoint directory: 174 (MaxText), checkpoint_00000174 (Pax)


def loopback_up() -> None:
    """`ip link set lo up` without iproute2: SIOCGIFFLAGS, then SIOCSIFFLAGS with IFF_UP."""
    get_flags, set_flags, up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sh", fcntl.ioctl(s, get_flags, struct.pack("16sh", b"lo", 0)))[1]
        fcntl.ioctl(s, set_flags, struct.pack("16sh", b"lo", flags | up))


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.loads(answer.read())


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Driver:
    def __init__(self, plan: dict[str, Any]) -> None:
        self.plan = plan
        self.tmp = Path(plan["tmp"])
        self.port = free_port()

    def status(self) -> dict[str, Any]:
        answer: dict[str, Any] = get(f"http://127.0.0.1:{self.port}/status")
        return answer

    def daemon_up(self) -> bool:
        try:
            return len(self.status()["metadata"]) == 3
        except OSError:
            return False

    def start(self, run: dict[str, Any], log: Path) -> subprocess.Popen[bytes]:
        launcher = [self.plan["python"], self.plan["launcher"], self.plan["device"]]
        mode = "gate" if run.get("gate") else "go"
        args, env = list(run["args"]), dict(self.plan["env"])
        if "steps_after_latest" in run:  # a resume that ends by itself a few steps after the newest save
            found = (TRAILING_NUMBER.search(p.name) for p in Path(self.plan["checkpoints"]).iterdir())
            steps = str(max(int(m.group(1)) for m in found if m) + run["steps_after_latest"])
            kind, name = self.plan["steps_as"]  # ("arg", "steps=") or ("env", "PAX_TRAIN_STEPS")
            args += [name + steps] if kind == "arg" else []
            env.update({name: steps} if kind == "env" else {})
        with log.open("wb") as out:
            return subprocess.Popen(
                [*launcher, mode, *self.plan["args"], *args],
                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, cwd=self.tmp,
                env={"PATH": "/usr/bin:/bin", "HOME": str(self.tmp), **env},
            )  # fmt: skip

    def reached(self, run: dict[str, Any], log: Path, job: subprocess.Popen[bytes]) -> bool:
        """Is the run where its event is due? (Raises if it ended first.)"""
        if job.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the job exited {job.returncode} before its event:\n{tail}")
        text = log.read_text(errors="replace")
        if run.get("gate"):
            return str(self.plan["imported"]) in text
        return len(re.findall(self.plan["step_pattern"], text)) >= run["event_after_steps"]

    def history(self, *words: str) -> Any:
        """`tpu-watchdog history` of the daemon's state dir: the `--json` list (newest first), or with
        `words` set, the text."""
        state = str(self.tmp / "state")
        argv = [sys.executable, "-m", "watchdog", "history", "--state-dir", state, *(words or ["--json"])]
        shown = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
        return json.loads(shown) if not words else shown

    def history_after(self, drains_before: int) -> tuple[dict[str, Any], str]:
        """The newest drain's history entry once it has ended (the history is written just after /status
        shows the end), and the newest drain in words."""

        def newest_ended() -> dict[str, Any] | None:
            listed = self.history()
            return listed[0] if len(listed) > drains_before and listed[0]["outcome"] else None

        entry = wait_for(newest_ended, timeout=60, interval=0.2, what="the drain's end in the history")
        assert entry is not None  # wait_for returns a truthy value or fails
        return entry, str(self.history("--limit", "1"))

    def one_run(self, fake: FakeMetadataServer, run: dict[str, Any]) -> dict[str, Any]:
        log = self.tmp / f"{run['name']}.log"
        job = self.start(run, log)
        before = self.status()["last_drain"]
        drains_before = len(self.history())
        event = run.get("event")
        limit = self.plan.get("start_timeout", 600)  # to its first steps, on a busy machine
        if event:
            wait_for(lambda: self.reached(run, log, job), limit, interval=0.1, what="the job to train")
            fake.set(event["key"], event["value"])
            triggered = time.time()
        pidfd = os.pidfd_open(job.pid)
        ready = readable([pidfd], limit + 600)  # a run without an event: to its end
        os.close(pidfd)
        if not ready:
            job.kill()
            raise RuntimeError(f"the job did not exit:\n{log.read_text()[-3000:]}")
        exited = time.time()
        record = None
        if event:  # the daemon's drain must end (and read the exit status) before the run is reaped
            wait_for(
                lambda: self.status()["last_drain"] not in (None, before), timeout=60, interval=0.05,
                what="the daemon's drain to end",
            )  # fmt: skip
            record = self.status()["last_drain"]  # the drain's history entry, as /status has it
            entry, words = self.history_after(drains_before)
        code = job.wait()
        if event:
            fake.set(event["key"], event["clear"])
            wait_for(lambda: self.status()["state"] == "idle", timeout=60, interval=0.05, what="idle again")
        return {
            "name": run["name"],
            "returncode": code,
            "exit_after_event_s": exited - triggered if event else None,
            "drain": record,
            "history": entry if event else None,
            "history_words": words if event else "",
            "log": log.read_text(errors="replace"),
        }

    def main(self) -> list[dict[str, Any]]:
        loopback_up()
        results = []
        with FakeMetadataServer(listen="127.0.0.1:0") as fake:
            (self.tmp / "empty.toml").write_text("")
            daemon = subprocess.Popen(
                [sys.executable, "-m", "watchdog", "run", "--config", str(self.tmp / "empty.toml"),
                 "--metadata-host", fake.address, "--device", self.plan["device"],
                 "--state-dir", str(self.tmp / "state"), "--listen", f"127.0.0.1:{self.port}",
                 "--metadata-timeout-sec", "5", "--preempt-grace", PREEMPT_GRACE],
                stderr=(self.tmp / "daemon.log").open("wb"),
            )  # fmt: skip
            try:
                wait_for(self.daemon_up, timeout=60, interval=0.1, what="the daemon to answer /status")
                for run in self.plan["runs"]:
                    results.append(self.one_run(fake, run))
            finally:
                daemon.terminate()
                daemon.wait(timeout=20)
        return results


if __name__ == "__main__":
    plan = json.loads(Path(sys.argv[1]).read_text())
    Path(plan["result"]).write_text(json.dumps(Driver(plan).main()))
