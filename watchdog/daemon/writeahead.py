"""The daemon's writes to the state file, in a thread of their own: a stuck disk never holds a signal back,
nor the loop.

The loop's writes of its lifecycle (`save`) and a drain's waves go through one queue, in the order they
were asked for: a drain is started after the write of its own state is queued, so the file knows the drain
before any of its signals, with no handshake between the two threads.

A wave's intents (`intents`) are written ahead: the drain holds the wave until the writer says the write
carrying them is done (`written(ticket)`, heard by the loop as `changed()`), at most WRITE_AHEAD_WAIT. A
first wave's intents ride in the loop's save of its drain (`save(change, intents)`): the wave waits for that
write, never a second one. What became of the signals (`sents`) is queued and never waited for. One thread
and one queue: the writes keep their order. The fsyncs run in a second thread (`StateStore.sync`, after the
writes, coalesced), so that the next wave's write never waits for the last one's fsync. Each thread runs
while it has something to do: an idle daemon has neither.

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
from collections.abc import Callable, Sequence

from watchdog.core.process import ProcessIdentity
from watchdog.store.coalesced import Coalesced
from watchdog.store.records import ExitRecord, Intent, SavedState, signal_name
from watchdog.store.statefile import StateStore

log = logging.getLogger("tpu-watchdog")


class StateWriter:
    """Writes the loop's state and a drain's intents and results to `store` in order, calling `changed()`
    after each write (done or failed). Each write has a ticket, its place in the queue: `written(ticket)`
    says whether it is done."""

    def __init__(
        self,
        store: StateStore,
        changed: Callable[[], None],
        spawn: Callable[[Callable[[], None], str], threading.Thread] | None = None,
    ) -> None:
        """`spawn`: starts the writing thread (the daemon's clock's, so a test's clock holds its time
        still while the disk writes); None: a plain thread."""
        self._store, self._changed = store, changed
        self._spawn = spawn or _thread
        self._jobs: collections.deque[tuple[int, Callable[[], None]]] = collections.deque()
        self._lock = threading.Lock()
        self._running = False
        self._tickets = 0  # the last ticket handed out
        self._done = 0  # the last ticket written (or failed): tickets are written in order
        self._queued: dict[tuple[ProcessIdentity, str], int] = {}  # intents in a queued save: its ticket
        self._ends: list[ExitRecord] | None = None  # processes' ends queued, their write not yet begun
        self._syncer = Coalesced(store.sync, "state-syncer", "making the state file durable")

    def intents(self, intents: Sequence[Intent]) -> int | None:
        """Queue the write-ahead of `intents`; the ticket of the write that carries them, or None when they
        are all on file already (a first wave, written with its drain's own state): nothing to wait for. A
        save still queued that carries them all is their write: no second one."""
        state = self._store.state
        missing = [i for i in intents if state.find(i.identity, i.signal) is None]
        if not missing:
            return None
        with self._lock:
            queued = [self._queued.get(_key(i)) for i in missing]
            if all(ticket is not None for ticket in queued):
                return max(t for t in queued if t is not None)
        return self._submit(lambda: self._store.record_intents(intents, durable=False))

    def written(self, ticket: int | None) -> bool:
        """Whether the write of `ticket` is done (or failed: a wave is not held back by a broken disk)."""
        with self._lock:
            return ticket is None or ticket <= self._done

    def save(self, change: Callable[[SavedState], SavedState], intents: Sequence[Intent] = ()) -> int:
        """Queue the loop's write of its lifecycle (`StateStore.lifecycle_change`), never waited for by the
        loop; its ticket. `intents`: the ones `change` writes (a new drain's first wave): `intents()` of
        those answers this write's ticket until it is done."""
        keys = [_key(i) for i in intents]

        def job() -> None:
            try:
                self._store.apply(change, durable=False)
            finally:
                with self._lock:
                    for key in keys:
                        if self._queued.get(key) == ticket:
                            del self._queued[key]

        with self._lock:
            ticket = self._submit_locked(job)
            self._queued.update(dict.fromkeys(keys, ticket))
        return ticket

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
        """Wait until everything queued so far is written (at most `wait` s); True if it was. Only where
        nothing else is to be done meanwhile: a stopping daemon, a test."""
        done = threading.Event()
        self._submit(done.set)
        return done.wait(wait)

    def _submit(self, job: Callable[[], None]) -> int:
        with self._lock:
            return self._submit_locked(job)

    def _submit_locked(self, job: Callable[[], None]) -> int:
        self._tickets += 1
        self._jobs.append((self._tickets, job))
        if not self._running:
            self._running = True
            self._spawn(self._run, "state-writer")
        return self._tickets

    def sync_soon(self) -> None:
        """Make the state file durable in the syncing thread (after a write that skipped its fsyncs); a
        failed fsync is tried again at the next write, the file is in the page cache meanwhile."""
        self._syncer.soon()

    def _run(self) -> None:
        while (next_job := self._next()) is not None:
            ticket, job = next_job
            try:
                job()
                self.sync_soon()
            except Exception:  # a failed write must not stop the ones after it
                with contextlib.suppress(Exception):  # nor a failing log line
                    log.exception("writing the state file failed")
            with self._lock:
                self._done = ticket
            with contextlib.suppress(Exception):  # the loop's inbox: it cannot fail, and must not stop us
                self._changed()

    def _next(self) -> tuple[int, Callable[[], None]] | None:
        """The next job, or None when there is none left (the thread then ends)."""
        with self._lock:
            if self._jobs:
                return self._jobs.popleft()
            self._running = False
            return None


def _thread(target: Callable[[], None], name: str) -> threading.Thread:
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


def _key(intent: Intent) -> tuple[ProcessIdentity, str]:
    return intent.identity, signal_name(intent.signal)
