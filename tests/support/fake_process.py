"""`tpu-watchdog fake-metadata` as a real process on a free loopback port, as users and jobs meet it."""

from __future__ import annotations

import subprocess
import sys

from tests.support.readable import readable

ANNOUNCE = "fake metadata server listening on "


def first_line(proc: subprocess.Popen[str], timeout: float = 20.0) -> str:
    assert proc.stdout is not None
    ready = readable([proc.stdout], timeout)
    assert ready, "the command announced nothing on stdout"
    return proc.stdout.readline()


def launch(procs: list[subprocess.Popen[str]], *args: str) -> tuple[subprocess.Popen[str], str]:
    """Start the fake with `args` (added to `procs` first, for `stop_all`); the process and its address."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "watchdog", "fake-metadata", "--listen", "127.0.0.1:0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    procs.append(proc)
    line = first_line(proc)
    assert line.startswith(ANNOUNCE), line
    return proc, line[len(ANNOUNCE) :].strip()


def stop_all(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)
