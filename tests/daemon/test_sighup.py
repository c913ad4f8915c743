"""daemon/sighup.py: each SIGHUP becomes one `ReloadAsked` in the loop's inbox, through a pipe, so the signal
handler takes no lock; a burst while the pipe is full is never lost as a whole (one reload is still asked)."""

from __future__ import annotations

import os
import queue
import signal

from watchdog.daemon.sighup import ReloadAsked, ReloadRequests


def test_a_real_sighup_reaches_the_inbox_as_one_reload() -> None:
    requests = ReloadRequests()
    inbox: queue.Queue[ReloadAsked] = queue.Queue()
    requests.forward(inbox.put)
    before = signal.signal(signal.SIGHUP, lambda *_: requests.ask())
    try:
        os.kill(os.getpid(), signal.SIGHUP)
        assert isinstance(inbox.get(timeout=10), ReloadAsked)
    finally:
        signal.signal(signal.SIGHUP, before)


def test_asking_never_blocks_and_a_full_pipe_still_leaves_a_reload_asked() -> None:
    requests = ReloadRequests()
    for _ in range(100_000):  # far past a pipe's 64 KiB: the handler must not block
        requests.ask()
    inbox: queue.Queue[ReloadAsked] = queue.Queue()
    requests.forward(inbox.put)
    assert isinstance(inbox.get(timeout=10), ReloadAsked)
