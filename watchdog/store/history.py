"""The drain history: `STATE_DIR/history.jsonl`, one JSON object per line, appended as drains start and end.

Why JSON lines: an append is one write(2) of one line and an fsync, so a crash can cost at most the line
being written, and a torn last line is skipped on load (said once), never fatal. A drain is written when it
starts (no outcome yet: a reboot mid-drain still leaves its trace) and again when it ends; the last line of
an id wins. Bounded: once the file holds more than `KEEP` drains, or more than `MAX_BYTES`, it is rewritten
(temp file, fsync, rename) with the newest `KEEP` drains younger than `MAX_AGE`; the newest is never
dropped. Mode 0600 (it names processes and users). A write that fails (full or read-only disk) is logged
once per kind of error, kept in `write_error`, and tried again with the next drain or `retry()`: the daemon
goes on either way.

Two processes write it: the daemon, and a `drill` run while the daemon runs. Every append and rewrite holds
an flock(2) on `STATE_DIR/.history.lock` (never the daemon's lock on the directory, which a drill must not
wait on), and a rewrite first re-reads the file under that lock and keeps the drains it did not write
itself, so the daemon's rotation never drops a drill's line. A lock another process holds past `LOCK_WAIT`
is a failed write like a full disk (kept in memory, tried again): the daemon never hangs on it.

The daemon's history writes in the background (`background=True`): a drain is in memory (`find`, `recent`)
at once, and a thread of its own appends and fsyncs it, so a hung disk never stops the loop that records
it. `changed()` is called after each attempt (the daemon's `history_persisted` gauge).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping

from watchdog.core.clock import Clock, SystemClock, parse_utc_text
from watchdog.store.coalesced import Coalesced

HISTORY_FILE = "history.jsonl"
LOCK_FILE = ".history.lock"  # flock(2)ed around every write, by the daemon and by a drill
LOCK_WAIT = 2.0  # s: a write waits this long for another process's (a few ms) before giving up for now
KEEP = 200  # drains kept (a host sees a few a month)
MAX_AGE = 400 * 86400.0  # s: older drains are dropped at the next rewrite, except the newest
MAX_BYTES = 8 << 20  # a drain of 500 holders is ~150 KiB; past this the file is rewritten
READ_LIMIT = 4 * MAX_BYTES  # a larger file (not written by us) is read from its end

log = logging.getLogger(__name__)

Entry = dict[str, object]


def load_entries(path: str, say: Callable[[str], None] | None = None) -> list[Entry]:
    """The drains of the file at `path`, oldest first, one per id (its last line). Lines that are not a
    drain (a torn last line after a crash, junk) are skipped and said once through `say`. A missing file
    is an empty history; an unreadable one raises OSError."""
    return _read(path, say)[0]


def _read(path: str, say: Callable[[str], None] | None) -> tuple[list[Entry], int]:
    """(the drains, how many lines the file holds)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return [], 0
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(fd).st_size
        if size > READ_LIMIT:
            handle.seek(size - READ_LIMIT)
            handle.readline()  # a partial line
        raw = handle.read(READ_LIMIT)
    by_id: dict[str, Entry] = {}
    skipped = lines = 0
    for line in raw.split(b"\n"):
        if not line.strip():
            continue
        lines += 1
        entry = _parse(line)
        if entry is None:
            skipped += 1
            continue
        drain_id = str(entry["id"])
        by_id.pop(drain_id, None)  # re-inserted: the order is that of the last line
        by_id[drain_id] = entry
    if skipped and say is not None:
        say(f"{path}: skipped {skipped} line(s) that are not a whole drain (a write cut short by a crash?)")
    return list(by_id.values()), lines


def _parse(line: bytes) -> Entry | None:
    try:
        entry = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("id"), str) or not entry["id"]:
        return None
    if not isinstance(entry.get("processes", []), list) or not isinstance(entry.get("started"), str):
        return None
    return entry


class HistoryFile:
    """The history of one state directory, kept in memory (newest last) and written through to disk.

    Thread-safe; `entries()` may be read from any thread (a tuple, replaced whole). `load=False`: start
    from nothing in memory (a drill, which only adds its drain with `write`)."""

    def __init__(
        self,
        state_dir: str,
        *,
        clock: Clock | None = None,
        keep: int = KEEP,
        load: bool = True,
        background: bool = False,
        fsync: Callable[[int], None] = os.fsync,
        changed: Callable[[], None] = lambda: None,
    ) -> None:
        self.dir = os.path.abspath(state_dir)
        self.path = os.path.join(self.dir, HISTORY_FILE)
        self.clock: Clock = clock or SystemClock()
        self.keep = keep
        self.write_error: OSError | None = None
        self._lock = threading.Lock()  # what is in memory: held for moments only, never across I/O
        self._disk = threading.Lock()  # one write at a time
        self._fsync, self._changed, self._background = fsync, changed, background
        self._writer = Coalesced(self._flush, "history-writer", f"history: writing {self.path}")
        self._unwritten: list[Entry] = []  # in memory, not yet on disk (being written, or a failed write)
        self._lines = 0
        self._entries: tuple[Entry, ...] = ()
        if load:
            self._load()

    def _load(self) -> None:
        temps = glob.escape(os.path.join(self.dir, f".{HISTORY_FILE}.")) + "*.tmp"
        if glob.glob(temps):  # a rewrite a crash interrupted (never renamed into place), or a drill's now
            with contextlib.suppress(OSError), self._locked():  # so: not while another process rewrites
                for leftover in glob.glob(temps):
                    with contextlib.suppress(OSError):
                        os.unlink(leftover)
        try:
            loaded, self._lines = _read(self.path, log.warning)
        except OSError as error:
            why = "a symlink, never followed" if error.errno == errno.ELOOP else str(error)
            log.error("history: cannot read %s (%s): starting a new one", self.path, why)
            loaded = []
            self._set_aside()
        self._entries = tuple(loaded[-self.keep :])

    def entries(self) -> tuple[Entry, ...]:
        return self._entries

    def recent(self, n: int) -> list[Entry]:
        """The newest `n` drains, newest first."""
        return list(reversed(self._entries[-n:])) if n > 0 else []

    def find(self, drain_id: str) -> Entry | None:
        return next((e for e in reversed(self._entries) if e.get("id") == drain_id), None)

    def append(self, entry: Mapping[str, object]) -> None:
        """Add or replace (same id) a drain: in memory at once, on disk now (in the background: soon) or
        at the next chance."""
        with self._lock:
            self._remember(entry)
        self._write_soon()

    def write(self, entry: Mapping[str, object]) -> None:
        """Add a drain and write it now, or raise the OSError that stopped it: for a process that records
        one drain and says itself when it could not (a drill). Reads the file under the lock first, so its
        rotation, if due, keeps everyone's drains."""
        with self._disk:
            with self._lock:
                self._remember(entry)
            self._write(reread=True)

    def settled(self, timeout: float) -> bool:
        """Wait up to `timeout` s for the background writes asked for so far (at exit); True if done."""
        return self._writer.settled(timeout)

    def retry(self) -> None:
        """Write what a failed write left in memory (the loop calls this now and then)."""
        if self._unwritten:
            self._write_soon()

    @property
    def unwritten(self) -> int:
        return len(self._unwritten)

    def _remember(self, entry: Mapping[str, object]) -> None:
        entry = dict(entry)
        others = tuple(e for e in self._entries if e.get("id") != entry["id"])
        self._entries = (*others, entry)[-self.keep :]
        self._unwritten = [e for e in self._unwritten if e.get("id") != entry["id"]] + [entry]

    def _write_soon(self) -> None:
        if self._background:
            self._writer.soon()
        else:
            self._flush()

    def _flush(self) -> None:
        with self._disk:
            self._flush_locked()
        with contextlib.suppress(Exception):  # an output's failure is its own to report
            self._changed()

    def _flush_locked(self) -> None:
        try:
            self._write(reread=False)
        except OSError as error:
            if self.write_error is None or self.write_error.errno != error.errno:
                log.error(
                    "history: cannot write %s (%s): %d drain(s) kept in memory only, written when the disk "
                    "allows", self.path, error.strerror or error, len(self._unwritten),
                )  # fmt: skip
            self.write_error = error
            return
        if self.write_error is not None:
            log.warning("history: %s written again", self.path)
        self.write_error = None

    def _write(self, *, reread: bool) -> None:
        """Holding `_disk`: append what is unwritten, or rewrite the whole file when it is due. A drain
        remembered meanwhile stays unwritten, for the next write."""
        with self._locked():
            if reread:
                self._merge()
            with self._lock:
                pending = list(self._unwritten)
            if not pending:
                return
            if self._lines + len(pending) > self.keep + self.keep // 2 or self._size() > MAX_BYTES:
                self._rewrite()
            else:
                self._append(b"".join(_line(e) for e in pending))
                self._lines += len(pending)
        written = {id(e) for e in pending}
        with self._lock:
            self._unwritten = [e for e in self._unwritten if id(e) not in written]

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """flock(2) on LOCK_FILE: one writer at a time across processes (the daemon, a drill)."""
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(os.path.join(self.dir, LOCK_FILE), flags, 0o600)
        try:
            give_up = time.monotonic() + LOCK_WAIT
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= give_up:
                        held = f"{LOCK_FILE} held by another process for {LOCK_WAIT:g} s"
                        raise OSError(errno.EAGAIN, held, self.path) from None
                    time.sleep(0.01)  # a drill's write holds it for milliseconds
            yield
        finally:
            os.close(fd)  # releases the lock

    def _merge(self) -> None:
        """Take in the drains another process wrote (by id, its last line; ordered by start); this
        process's own stay as it has them (they may be newer than the file: a failed write)."""
        try:
            on_disk, self._lines = _read(self.path, None)
        except OSError as error:
            if error.errno != errno.ELOOP:
                raise
            on_disk = []  # a symlink: never read, and the rewrite replaces it
        with self._lock:
            mine = {e.get("id") for e in self._entries}
            merged = [*self._entries, *(e for e in on_disk if e.get("id") not in mine)]
            merged.sort(key=_started)  # stable: equal starts keep their order
            self._entries = tuple(merged)

    def _size(self) -> int:
        try:
            return os.stat(self.path, follow_symlinks=False).st_size
        except FileNotFoundError:
            return 0

    def _append(self, data: bytes) -> None:
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.path, flags, 0o600)
        try:
            info = os.fstat(fd)
            if info.st_mode & 0o077:
                os.fchmod(fd, 0o600)
            if info.st_size and os.pread(fd, 1, info.st_size - 1) != b"\n":
                data = b"\n" + data  # a torn last line (a crash mid-write) stays a line of its own
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(errno.ENOSPC, "short write", self.path)
            self._fsync(fd)
        finally:
            os.close(fd)

    def _rewrite(self) -> None:
        """Keep the newest `keep` drains younger than MAX_AGE (the newest always, and those being written)
        and under MAX_BYTES; first take in what other processes wrote since this one last looked."""
        self._merge()
        now = self.clock.wall()
        with self._lock:
            entries, writing = self._entries, {e.get("id") for e in self._unwritten}
        kept = [e for e in entries[:-1] if e.get("id") in writing or now - _started(e) <= MAX_AGE]
        kept += list(entries[-1:])
        while len(kept) > self.keep:  # the oldest first, but never the newest nor one being written
            kept.pop(next((i for i, e in enumerate(kept[:-1]) if e.get("id") not in writing), 0))
        lines = [_line(e) for e in kept]
        while len(lines) > 1 and sum(map(len, lines)) > MAX_BYTES // 2:
            lines.pop(0)
            kept.pop(0)
        fd, temp = tempfile.mkstemp(dir=self.dir, prefix=f".{HISTORY_FILE}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(b"".join(lines))
                handle.flush()
                self._fsync(handle.fileno())
            os.replace(temp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        dir_fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            self._fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self._lines = len(lines)
        dropped = {id(e) for e in entries} - {id(e) for e in kept}
        with self._lock:  # what was remembered meanwhile stays
            self._entries = tuple(e for e in self._entries if id(e) not in dropped)

    def _set_aside(self) -> None:
        stamp = int(self.clock.wall())
        with contextlib.suppress(OSError):
            os.rename(self.path, f"{self.path}.unreadable-{stamp}")


def _line(entry: Mapping[str, object]) -> bytes:
    return json.dumps(entry, separators=(",", ":"), sort_keys=False).encode() + b"\n"


def _started(entry: Mapping[str, object]) -> float:
    """The wall time of an entry's start (0 when it cannot be read: such an entry is old)."""
    value = entry.get("started")
    return parse_utc_text(value) if isinstance(value, str) else 0.0
