"""daemon/sighup.py: SIGTERM sets `stop` and SIGHUP becomes a `ReloadAsked` in the loop's inbox at once,
whichever thread the kernel gives the signal to; a reload asked during start-up is held, not lost."""

from __future__ import annotations

import queue
import subprocess
import sys

from tests.support.units import REPO
from watchdog.daemon.sighup import ReloadAsked, ReloadRequests


def test_a_reload_asked_during_start_up_is_held_and_a_burst_is_one_reload() -> None:
    requests = ReloadRequests()
    for _ in range(1000):  # before the loop has an inbox
        requests.ask()
    inbox: queue.Queue[ReloadAsked] = queue.Queue()
    requests.forward(inbox.put)
    assert isinstance(inbox.get_nowait(), ReloadAsked)
    assert inbox.empty()
    requests.ask()  # once forwarding, each request is one message
    assert isinstance(inbox.get_nowait(), ReloadAsked)


GIVEN_TO_ANOTHER_THREAD = r"""
import queue, signal, threading, time
from watchdog.daemon.sighup import ReloadAsked, ReloadRequests, relay_signals

stop, reloads, inbox = threading.Event(), ReloadRequests(), queue.Queue()
relay_signals(stop, reloads)
reloads.forward(inbox.put)
threading.Thread(target=lambda: (stop.wait(), inbox.put("stop")), daemon=True).start()

main = threading.get_native_id()

def main_asleep():
    with open(f"/proc/self/task/{main}/stat") as stat:
        return stat.read().rpartition(")")[2].split()[0] == "S"

def signalled_here(signum):  # the kernel gives a process's signal to any thread: here, not the main one
    def send():
        deadline = time.monotonic() + 10
        while not main_asleep() and time.monotonic() < deadline:
            time.sleep(0.01)  # polling the main thread's state: it must be in its timed wait first
        signal.pthread_kill(threading.get_ident(), signum)
    threading.Thread(target=send, daemon=True).start()

signalled_here(signal.SIGHUP)
print(type(inbox.get(timeout=10)).__name__)  # the main thread asleep in a timed wait, as the loop is
signalled_here(signal.SIGTERM)
print(inbox.get(timeout=10))
"""


def test_a_signal_given_to_another_thread_wakes_the_sleeping_main_thread_at_once() -> None:
    """Python would run its handler only once the main thread woke on its own (10 s here, 30 s idle)."""
    done = subprocess.run(
        [sys.executable, "-c", GIVEN_TO_ANOTHER_THREAD],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ReloadAsked", "stop"]
