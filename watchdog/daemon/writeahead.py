"""The daemon's writes to the state file, in a thread of their own: a stuck disk never holds a signal back,
nor the loop.

The loop's writes of its lifecycle (`save`) and a drain's waves go through one queue, in the order they
were asked for: a drain is started after the write of its own state is queued, so the file knows the drain
before any of its signals, with no handshake between the two threads.

A wave's intents (`intents`) are written ahead: the wave waits until the new file is in place (renamed into
the state directory, in the page cache), at most `WRITE_AHEAD_WAIT`. A first wave's intents ride in the loop's
save of its drain (`save(change, intents)`): the wave waits for that write, never a second one. What became of
the signals (`sents`) is queued and never waited for. One thread and one queue: the writes keep their order.
The fsyncs run in a second thread (`StateStore.sync`, after the writes, coalesced), so that the next wave's
write never waits for the last one's fsync. Each thread runs while it has something to do: an idle daemon has
neither.

What a stuck disk costs: a file in the page cache only is lost with the host if the host dies, and so are
the processes it names (a state file of another boot is set aside). Past the bound the wave goes out with
its intents still queued: if the daemon itself dies before they are written, the restarted daemon does not
know of those signals, and a process may get a second SIGTERM (a second SIGKILL is harmless).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence

from watchdog.core.process import ProcessIdentity
from watchdog.store.coalesced import Coalesced
from watchdog.store.records import ExitRecord, Intent, SavedState, signal_name
from watchdog.store.statefile import StateStore

log = logging.getLogger("tpu-watchdog")

WRITE_AHEAD_WAIT = 0.5  # s a wave waits for its intents to be in place before it goes out anyway


class StateWriter:
    """Writes a drain's intents and results to `store` in order, calling `changed()` after each write."""

    def __init__(self, store: StateStore, changed: Callable[[], None]) -> None:
        self._store, self._changed = store, changed
        self._jobs: collections.deque[Callable[[], None]] = collections.deque()
        self._lock = threading.Lock()
        self._running = False
        self._queued: dict[tuple[ProcessIdentity, str], threading.Event] = {}  # intents in a queued save
        self._ends: list[ExitRecord] | None = None  # processes' ends queued, their write not yet begun
        self._syncer = Coalesced(store.sync, "state-syncer", "making the state file durable")

    def intents(self, intents: Sequence[Intent], wait: float = WRITE_AHEAD_WAIT) -> bool:
        """Write `intents` ahead; True once the file is in place, False when
        `wait` s passed first (the write goes on in the thread). Intents all on file already (a first wave,
        written with its drain's own state) cost nothing: no write, no thread, no wait."""
        state = self._store.state
        missing = [i for i in intents if state.find(i.identity, i.signal) is None]
        if not missing:
            return True
        with self._lock:
            queued = [self._queued.get(_key(i)) for i in missing]
        if all(queued):  # each in a save still queued: wait for those writes, not one more
            until = time.monotonic() + wait
            saves = {id(e): e for e in queued if e is not None}.values()
            return all(done.wait(max(0.0, until - time.monotonic())) for done in saves)
        written = threading.Event()

        def job() -> None:
            try:
                self._store.record_intents(intents, written=written.set, durable=False)
            finally:
                written.set()

        self._submit(job)
        return written.wait(wait)

    def save(self, change: Callable[[SavedState], SavedState], intents: Sequence[Intent] = ()) -> None:
        """Queue the loop's write of its lifecycle (`StateStore.lifecycle_change`), never waited for by the
        loop. `intents`: the ones `change` writes (a new drain's first wave), which that wave waits for."""
        if not intents:
            self._submit(lambda: self._store.apply(change, durable=False))
            return
        written, keys = threading.Event(), [_key(i) for i in intents]

        def job() -> None:
            try:
                self._store.apply(change, durable=False)
            finally:
                with self._lock:
                    for key in keys:
                        if self._queued.get(key) is written:
                            del self._queued[key]
                written.set()

        with self._lock:
            self._queued.update(dict.fromkeys(keys, written))
        self._submit(job)

    def sents(self, sent: Sequence[tuple[ProcessIdentity, int, str]]) -> None:
        """Queue what became of a wave's signals (identity, signal, SignalResult value)."""
        self._submit(lambda: self._store.record_sents(sent, durable=False))

    def exits(self, exits: Sequence[ExitRecord]) -> None:
        """Queue how signalled processes ended (`ExitRecord`), never waited for. Ends that come while an
        earlier batch waits for the writer join its write: a burst of exits costs a write per write's
        time, not one per batch."""
        with self._lock:
            if self._ends is not None:
                self._ends.extend(exits)
                return
            batch = self._ends = list(exits)

        def job() -> None:
            with self._lock:
                self._ends = None  # from now on, ends go in the next write
            self._store.record_exits(batch, durable=False)

        self._submit(job)

    def flush(self, wait: float) -> bool:
        """Wait until everything queued so far is written (at most `wait` s); True if it was."""
        done = threading.Event()
        self._submit(done.set)
        return done.wait(wait)

    def _submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            self._jobs.append(job)
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name="state-writer", daemon=True).start()

    def sync_soon(self) -> None:
        """Make the state file durable in the syncing thread (after a write that skipped its fsyncs); a
        failed fsync is tried again at the next write, the file is in the page cache meanwhile."""
        self._syncer.soon()

    def _run(self) -> None:
        while (job := self._next()) is not None:
            try:
                job()
                self.sync_soon()
                self._changed()
            except Exception:  # a failed write must not stop the ones after it
                with contextlib.suppress(Exception):  # nor a failing log line
                    log.exception("writing the state file failed")

    def _next(self) -> Callable[[], None] | None:
        """The next job, or None when there is none left (the thread then ends)."""
        with self._lock:
            if self._jobs:
                return self._jobs.popleft()
            self._running = False
            return None


def _key(intent: Intent) -> tuple[ProcessIdentity, str]:
    return intent.identity, signal_name(intent.signal)
