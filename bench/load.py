"""Load: one real daemon, N real holder processes, one preemption. `python -m bench.load --holders 500`.

Runs in a private PID namespace (re-executes itself under `unshare`), so the daemon's real scanner sees
only these holders, on a device node whose numbers nothing else on the machine holds (`UniqueDevice`). A
farm process opens the device node and forks the holders (copy-on-write: 500 Python interpreters would
need gigabytes); each appends "PID TIME" to a log when SIGTERM arrives, then exits, or
(the `--ignore` share) keeps running until the SIGKILL at the deadline. The result: when each holder got
its SIGTERM, how many got more than one, how the drain ended, and the daemon's peak RSS (VmHWM).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support.workloads import UniqueDevice
from watchdog.fake.server import FakeMetadataServer

FARM = r"""
import os, signal, sys, time
device, log, count, ignore = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
dev = os.open(device, os.O_PATH)
out = os.open(log, os.O_WRONLY | os.O_APPEND)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
for i in range(count):
    if os.fork() == 0:
        stays = i < ignore
        def term(*_):
            os.write(out, f"{os.getpid()} {time.time():.6f}\n".encode())
            if not stays:
                os._exit(0)
        signal.signal(signal.SIGTERM, term)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        while True:
            signal.pause()
os.close(dev)
print("ready", flush=True)
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
"""


def measure(holders: int, ignore: int, grace: float, work: Path) -> dict[str, Any]:
    node = UniqueDevice(work)  # numbers no other process on the machine holds; the farm opens it O_PATH
    device = node.path
    log = work / "terms.log"
    log.touch()
    (work / "config.toml").write_text(f"[drain]\npreemption_grace = {grace}\n")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(work / "notify"))
    notify.settimeout(60)
    farm = subprocess.Popen(
        [sys.executable, "-c", FARM, str(device), str(log), str(holders), str(ignore)], stdout=subprocess.PIPE
    )
    assert farm.stdout is not None
    assert farm.stdout.readline().strip() == b"ready"
    with FakeMetadataServer() as fake, open(work / "daemon.log", "wb") as daemon_log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "watchdog", "run", "--config", str(work / "config.toml"),
             "--metadata-host", fake.address, "--device", str(device), "--state-dir", str(work / "state"),
             "--listen", "127.0.0.1:0", "--metadata-timeout-sec", "2"],
            env=dict(os.environ, NOTIFY_SOCKET=str(work / "notify")), stderr=daemon_log,
        )  # fmt: skip
        while "READY=1" not in notify.recv(4096).decode():
            pass
        event = time.time()
        fake.set("instance/preempted", "TRUE")
        while True:  # until the daemon says the drain is over (STATUS=timed_out / drained)
            message = notify.recv(4096).decode()
            if "STATUS=drained" in message or "STATUS=timed_out" in message:
                outcome = message.split("STATUS=", 1)[1].split(":", 1)[0]
                break
        ended = time.time()
        status = Path(f"/proc/{daemon.pid}/status").read_text()
        peak_kib = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))
        daemon.send_signal(signal.SIGTERM)
        daemon_exit = daemon.wait(timeout=30)
    farm.wait(timeout=30)
    node.close()
    terms: dict[int, list[float]] = {}
    for line in log.read_text().splitlines():
        pid, at = line.split()
        terms.setdefault(int(pid), []).append(float(at))
    return {
        "holders": holders,
        "ignore": ignore,
        "grace": grace,
        "signalled": len(terms),
        "most_sigterms_to_one": max((len(v) for v in terms.values()), default=0),
        "last_sigterm_after_event_s": max((min(v) for v in terms.values()), default=0.0) - event,
        "first_sigterm_after_event_s": min((min(v) for v in terms.values()), default=0.0) - event,
        "drain_over_after_event_s": ended - event,
        "outcome": outcome,
        "daemon_peak_rss_kib": peak_kib,
        "daemon_exit": daemon_exit,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.splitlines()[0])
    parser.add_argument("--holders", type=int, default=500)
    parser.add_argument("--ignore", type=int, default=0, help="how many of them ignore SIGTERM")
    parser.add_argument("--grace", type=float, default=5.0)
    parser.add_argument("--out", help="write the result as JSON here (default: stdout)")
    args = parser.parse_args(argv)
    if os.getpid() != 1:  # re-execute in a PID namespace of our own: the daemon sees only our holders
        given = sys.argv[1:] if argv is None else argv
        unshare = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
        return subprocess.call([*unshare, sys.executable, "-m", "bench.load", *given])
    with tempfile.TemporaryDirectory(prefix="tpu-watchdog-load-") as work:
        result = measure(args.holders, args.ignore, args.grace, Path(work))
    text = json.dumps(result)
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
