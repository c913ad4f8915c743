"""The state file: what the daemon must remember if it dies mid-event (`STATE_DIR/state.json`).

Write-ahead for signals: `record_intent` is on disk before the signal goes out, `record_sent` after, so a
daemon that crashed in between finds an unconfirmed intent and treats it as possibly sent (SIGTERM at most
once per event). Every write is atomic (temp file, fsync, rename, fsync of the directory; a drain's first
wave may signal between the rename and the fsyncs: `save_lifecycle`). Loading never
raises on our own file: a corrupt, foreign or previous-boot file is logged, set aside, and a clean state used.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import glob
import json
import logging
import os
import stat
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace

from watchdog.core.clock import Clock, SystemClock
from watchdog.core.lifecycle import ActiveDrain, Event
from watchdog.core.process import ProcessIdentity
from watchdog.core.vocabulary import DEFAULT_ON_TIMEOUT, OnTimeout
from watchdog.store.files import link_unique, read_regular, unlink_quietly
from watchdog.store.records import (
    ExitRecord,
    Intent,
    SavedState,
    SignalRecord,
    StateFormatError,
    plain,
    signal_name,
)

STATE_FILE = "state.json"
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
MAX_BYTES = 1 << 20  # ours are a few KiB; anything this large is not ours
KEEP_SET_ASIDE = 5  # set-aside files kept per kind; older ones are deleted

log = logging.getLogger(__name__)


class StateDirError(OSError):
    """The state directory cannot be created or written; the message names the path and the fix."""

    @classmethod
    def unusable(cls, state_dir: str, error: OSError) -> StateDirError:
        """Why `state_dir` (or a parent of it) cannot be the state directory, in words, with the fix."""
        fix = "choose another with --state-dir (or state_dir in the config file)"
        blocker = _first_non_directory(state_dir)
        if blocker == os.path.abspath(state_dir):
            problem = f"state dir {state_dir} is a file, not a directory: remove it, or {fix}"
        elif blocker is not None:
            problem = f"state dir {state_dir}: {blocker} is a file, not a directory; {fix}"
        elif os.path.islink(state_dir):
            problem = (
                f"state dir {state_dir} is a symlink: never followed (whoever can change it could point "
                f"the daemon elsewhere); use the directory it points to, or {fix}"
            )
        elif error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            problem = (
                f"state dir {state_dir}: cannot create it ({error.strerror}): fix its permissions, or {fix}"
            )
        else:
            problem = f"state dir {state_dir}: cannot use it ({error.strerror}); {fix}"
        return cls(error.errno, problem)


def _first_non_directory(path: str) -> str | None:
    """The first of `path` and its parents that exists and is not a directory (`path` itself not
    followed if it is a symlink), or None."""
    path = os.path.abspath(path)
    parts = path.split(os.sep)
    for end in range(2, len(parts) + 1):
        prefix = os.sep.join(parts[:end])
        try:
            info = os.lstat(prefix) if prefix == path else os.stat(prefix)
        except OSError:
            return None  # missing (or unreadable): nothing in the way that a file could explain
        if stat.S_ISLNK(info.st_mode):
            return None  # the state dir itself is a symlink: said as such
        if not stat.S_ISDIR(info.st_mode):
            return prefix
    return None


def read_boot_id(path: str = BOOT_ID_PATH) -> str:
    """This boot's id ('' if unreadable). Process start times count from boot, so a state file written in
    another boot names no living process."""
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError) as error:
        log.warning(
            "cannot read the boot id from %s (%s): state from before a reboot cannot be told apart",
            path,
            error,
        )
        return ""


class StateStore:
    """The state of the current event, kept in memory and written through to disk on every change.

    Thread-safe. A failed write is logged and kept in `write_error`, and the in-memory state stays the truth:
    the drain goes on, because missing a checkpoint is worse than a possible second SIGTERM after a crash.
    """

    def __init__(
        self,
        state_dir: str,
        *,
        boot_id: str | None = None,
        clock: Clock | None = None,
        fsync: Callable[[int], None] = os.fsync,
    ) -> None:
        self.dir = os.path.abspath(state_dir)
        self.fsync = fsync  # injected: a test's stuck disk; the history (same disk) uses it too
        self.path = os.path.join(self.dir, STATE_FILE)
        self.boot_id = read_boot_id() if boot_id is None else boot_id
        self.clock: Clock = clock or SystemClock()
        self.write_error: OSError | None = None
        self.previous_boot: SavedState | None = None  # a file of another boot, set aside (its drain: history)
        self._lock = threading.Lock()
        self._prepare_dir()
        self._state = self._load()

    @property
    def state(self) -> SavedState:
        return self._state

    # -- the events and the drain ---------------------------------------------------------------------

    def save_lifecycle(
        self,
        events: Iterable[Event],
        drain: ActiveDrain | None,
        last_outcome: str | None,
        *,
        on_timeout: OnTimeout,
        intents: Iterable[Intent] = (),
        last_dry_run: bool = False,
        written: Callable[[], None] | None = None,
        durable: bool = True,
        ended: ActiveDrain | None = None,
        ended_at: float | None = None,
    ) -> None:
        """The daemon's events and drain as they are now (copied: the lifecycle goes on changing its own),
        and what the drain's deadline does. A new drain (another start time) starts with no signals
        recorded, except a late-arrival drain: the signals of its events' earlier drains still count (one
        SIGTERM per process per event). The signals of a finished drain stay, for `status`. `intents`: the
        new drain's first wave (see `record_intents`), in the same write: one write, not two, before the
        first SIGTERM. `written` is called once that write is in place, before its fsyncs: the drain may
        signal then, because what is in the page cache is all a restarted daemon can read anyway (a crash of
        the daemon keeps it), and what only a crash of the host loses names processes that died with it (a
        file of another boot is set aside at load). The fsyncs (median 1.8 ms, but hundreds of ms when ext4
        has other writes to commit: docs/benchmarks.md) so come after the first SIGTERM. `durable=False`: no
        fsyncs here at all (the daemon's loop: `sync()` runs in a thread of its own, so a hung disk never
        stops the loop from hearing the next event). `ended`, `ended_at`: the drain that ended while its
        events are on, and when: a late arrival joins it, after a restart too."""
        change = self.lifecycle_change(
            events, drain, last_outcome, on_timeout=on_timeout, intents=intents, last_dry_run=last_dry_run,
            ended=ended, ended_at=ended_at,
        )  # fmt: skip
        self._update(change, written, durable)

    def lifecycle_change(
        self,
        events: Iterable[Event],
        drain: ActiveDrain | None,
        last_outcome: str | None,
        *,
        on_timeout: OnTimeout,
        intents: Iterable[Intent] = (),
        last_dry_run: bool = False,
        ended: ActiveDrain | None = None,
        ended_at: float | None = None,
    ) -> Callable[[SavedState], SavedState]:
        """What `save_lifecycle` writes, as a change to apply later (`apply`): the events and drains are
        copied now, in the caller's thread, so the lifecycle may go on changing its own meanwhile."""
        intents = list(intents)
        saved_events = tuple(replace(e, confirmed=False) for e in events)  # as a reload gives them back
        saved_drain = (
            None if drain is None else replace(drain, event_ids=list(drain.event_ids), cancelling=False)
        )
        saved_ended = None if ended is None else replace(ended, event_ids=list(ended.event_ids))

        def change(state: SavedState) -> SavedState:
            new_drain = (
                saved_drain is not None
                and not saved_drain.late
                and (state.drain is None or state.drain.started != saved_drain.started)
            )
            cleared = new_drain or (not saved_events and saved_drain is None)  # the signals go with the drain
            signals, exits = ((), ()) if cleared else (state.signals, state.exits)
            state = replace(
                state, events=saved_events, drain=saved_drain, last_outcome=last_outcome, signals=signals,
                exits=exits,
                on_timeout=on_timeout if saved_drain is not None else DEFAULT_ON_TIMEOUT,
                last_dry_run=last_dry_run and last_outcome is not None, ended_drain=saved_ended,
                ended_at=ended_at if saved_ended is not None else None,
            )  # fmt: skip
            return _with_intents(state, intents, self.clock.wall())

        return change

    def apply(self, change: Callable[[SavedState], SavedState], durable: bool = True) -> None:
        """One change (`lifecycle_change`) applied to the state as it is then, and written."""
        self._update(change, durable=durable)

    # -- signals (write-ahead) -------------------------------------------------------------------------

    def record_intent(self, identity: ProcessIdentity, signal: int | str, *, name: str = "") -> SignalRecord:
        """On disk before the signal is sent. A repeat call (same process and signal) keeps the first."""
        self.record_intents([Intent(identity, signal, name)])
        record = self._state.find(identity, signal)
        assert record is not None  # noqa: S101 - just recorded (in memory even if the write failed)
        return record

    def record_intents(
        self,
        intents: Iterable[Intent],
        written: Callable[[], None] | None = None,
        durable: bool = True,
    ) -> None:
        """Several intents in one write, all on disk before any is sent:
        a drain's first wave to many holders costs one fsync, not one per holder. Intents all on file
        already (a first wave, saved with its drain) cost nothing: not even a wait for the lock, which that
        write holds while it is made durable (`save_lifecycle`'s `written`). `written`, as there: called
        once the file is in place (or nothing needed writing), before its fsyncs. `durable=False`: no
        fsyncs at all; `sync()` makes it durable later (daemon/writeahead.py, off the signal path)."""
        intents = list(intents)
        if not all(self._state.find(i.identity, i.signal) is not None for i in intents):
            with self._lock:
                state = _with_intents(self._state, intents, self.clock.wall())
                if state is not self._state:
                    self._write(state, written, durable)
                    return
        if written is not None:
            written()

    def record_sent(self, identity: ProcessIdentity, signal: int | str, result: str) -> SignalRecord:
        """After the signal: when it went and how (a SignalResult value such as "sent" or "gone")."""
        self.record_sents([(identity, signal, result)])
        record = self._state.find(identity, signal)
        assert record is not None  # noqa: S101 - just recorded
        return record

    def record_sents(
        self, sent: Iterable[tuple[ProcessIdentity, int | str, str]], durable: bool = True
    ) -> None:
        """What became of several signals (identity, signal, result), in one write (`durable`: as above)."""
        with self._lock:
            state, now = self._state, self.clock.wall()
            for identity, signal, result in sent:
                intent = state.find(identity, signal)
                if intent is None:
                    log.warning(
                        "state: %s sent to %s with no intent recorded first", signal_name(signal), identity
                    )
                    intent = SignalRecord(identity, "", signal_name(signal), now)
                state = state.with_signal(replace(intent, sent_at=now, result=str(plain(result))))
            self._write(state, durable=durable)

    def record_exits(self, exits: Iterable[ExitRecord], durable: bool = True) -> None:
        """How signalled processes ended (`ExitRecord`), in one write (`durable`: as above); an end on file
        for the same process is replaced."""
        with self._lock:
            self._write(self._state.with_exits(exits), durable=durable)

    def sync(self) -> None:
        """fsync the file as it is now, and its directory: what `durable=False` writes left for later.
        Without the lock: a stuck disk here holds up no write."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            return  # not written (yet), or gone: nothing to make durable
        try:
            self.fsync(fd)
        finally:
            os.close(fd)
        self._fsync_dir()

    def already_signalled(self, identity: ProcessIdentity, signal: int | str) -> bool:
        """True if this event already sent (or may have sent, before a crash) `signal` to `identity`."""
        return self._state.find(identity, signal) is not None

    # -- disk ------------------------------------------------------------------------------------------

    def _update(
        self,
        change: Callable[[SavedState], SavedState],
        written: Callable[[], None] | None = None,
        durable: bool = True,
    ) -> None:
        with self._lock:
            self._write(change(self._state), written, durable)

    def _prepare_dir(self) -> None:
        """Create the directory (0700), or refuse one others could plant files in. A directory that exists
        but cannot be written (read-only, full) is no reason to leave the host unprotected: the daemon
        runs with its state in memory, and says so (`write_error`, the journal, a metric)."""
        try:
            os.makedirs(self.dir, mode=0o700, exist_ok=True)
            info = os.stat(self.dir)
        except OSError as error:
            raise StateDirError.unusable(self.dir, error) from None
        if info.st_uid != os.geteuid():
            raise StateDirError(
                errno.EPERM,
                f"state dir {self.dir} is owned by uid {info.st_uid}, not by this daemon (uid "
                f"{os.geteuid()}): whoever owns it could plant a state file; chown it or use --state-dir",
            )
        if info.st_mode & 0o022:
            log.warning("state: %s was group/other-writable (mode %o): made 0700", self.dir, info.st_mode)
            with contextlib.suppress(OSError):  # a read-only directory: the probe below says so
                os.chmod(self.dir, 0o700)
        self._remove_leftovers()
        try:
            probe = tempfile.NamedTemporaryFile(dir=self.dir, prefix=".probe-")  # noqa: SIM115 - closed at once
            probe.close()
        except OSError as error:
            log.error(
                "state: cannot write in %s (%s): STATE IS NOT PERSISTED; drains still run, from memory; "
                "a restart would forget them. Free space or make the directory writable",
                self.dir,
                error.strerror,
            )
            self.write_error = error

    def _remove_leftovers(self) -> None:
        """Temporary files of writes a crash (kill -9, power loss) interrupted: never renamed into place, so
        never the state; without this each crash mid-write would leave one for good."""
        pattern = glob.escape(os.path.join(self.dir, f".{STATE_FILE}.")) + "*.tmp"
        leftovers = glob.glob(pattern) + glob.glob(glob.escape(os.path.join(self.dir, ".probe-")) + "*")
        for path in leftovers:
            unlink_quietly(path)
        if leftovers:
            log.info("state: removed %d temporary file(s) left by an interrupted write", len(leftovers))

    def _write(
        self, state: SavedState, written: Callable[[], None] | None = None, durable: bool = True
    ) -> None:
        """Atomically replace the file with `state`; the in-memory state follows even if the disk fails.

        `written` (see `save_lifecycle`): called once the new file is in place, before the fsyncs that make
        it durable, or at once if the write fails; without it, the file is durable before the rename.
        `durable=False`: no fsyncs (`sync` later)."""
        data = json.dumps(state.to_json(self.clock.wall()), indent=1).encode()
        temp, notify = "", [written] if written is not None else []  # each called once, whatever happens
        try:
            fd, temp = tempfile.mkstemp(dir=self.dir, prefix=f".{STATE_FILE}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                if durable and not notify:
                    self.fsync(handle.fileno())
                os.replace(temp, self.path)
                temp, self._state = "", state
                if notify:
                    notify.pop()()
                if durable and written is not None:
                    self.fsync(handle.fileno())
            if durable:
                self._fsync_dir()
        except OSError as error:
            self._state = state
            while notify:
                notify.pop()()
            if self.write_error is None or self.write_error.errno != error.errno:
                # At debug: the daemon says it once, loudly, with its MESSAGE_ID (daemon/reporting.py).
                log.debug("state: cannot write %s (%s): the state lives in memory only", self.path, error)
            self.write_error = error
            if temp:
                unlink_quietly(temp)
            return
        if self.write_error is not None:
            log.debug("state: %s written again", self.path)
        self.write_error = None

    def _fsync_dir(self) -> None:
        fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            self.fsync(fd)
        finally:
            os.close(fd)

    def _load(self) -> SavedState:
        clean = SavedState(self.boot_id)
        try:
            raw = read_regular(self.path, MAX_BYTES + 1)
        except FileNotFoundError:
            return clean
        except OSError as error:
            why = "a symlink, never followed" if error.errno == errno.ELOOP else f"unreadable: {error}"
            log.error("state: cannot read %s (%s): starting clean", self.path, why)
            self._set_aside("corrupt", why)
            return clean
        try:
            if len(raw) > MAX_BYTES:
                raise StateFormatError(f"larger than {MAX_BYTES} bytes")
            state = SavedState.from_json(json.loads(raw))
        except (ValueError, RecursionError) as error:  # JSONDecodeError, UnicodeDecodeError, StateFormatError
            self._set_aside("corrupt", str(error))
            return clean
        if state.boot_id != self.boot_id:
            self.previous_boot = state
            if not state.empty:
                self._set_aside(
                    "stale", f"written in boot {state.boot_id}, this is boot {self.boot_id or '?'}"
                )
            return clean
        if state.unconfirmed():
            log.warning(
                "state: %d signal(s) recorded as intended but not confirmed sent (the daemon stopped in "
                "between); never sent again, and none of their processes is SIGKILLed before the metadata "
                "server confirms the event: %s",
                len(state.unconfirmed()),
                ", ".join(f"{s.signal} to {s.identity} {s.name}" for s in state.unconfirmed()),
            )
        return state

    def _set_aside(self, kind: str, reason: str) -> None:
        stamp = datetime.datetime.fromtimestamp(self.clock.wall(), datetime.timezone.utc).strftime(
            "%Y%m%dT%H%M%S.%fZ"
        )
        try:
            target = link_unique(self.path, f"{self.path}.{kind}-{stamp}")
            os.unlink(self.path)
        except OSError as error:
            log.error("state: %s is %s (%s) and cannot be moved aside (%s)", self.path, kind, reason, error)
            return
        log.warning("state: %s is %s (%s): moved to %s; starting clean", self.path, kind, reason, target)
        for old in sorted(glob.glob(glob.escape(self.path) + f".{kind}-*"))[:-KEEP_SET_ASIDE]:
            unlink_quietly(old)


def _with_intents(state: SavedState, intents: Iterable[Intent], now: float) -> SavedState:
    """`state` with a record of each intent not on file yet; the same object if none."""
    for i in intents:
        if state.find(i.identity, i.signal) is None:
            record = SignalRecord(i.identity, i.name, signal_name(i.signal), now, sigterm=i.sigterm)
            state = state.with_signal(record)
    return state
