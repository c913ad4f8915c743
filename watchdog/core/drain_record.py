"""The drain's record: how a signal attempt went, how a process ended, what the drain did (its outcome).

Pure data; its JSON is the history entry (`store/drain_entry.py`), the one shape every surface renders
(`store/drain_text.py` puts it in words). Times are monotonic seconds of the drain's clock;
`DrainRecord.wall()` turns them into wall-clock seconds.
"""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass, field

from watchdog.core.ladder import KILL, signal_name
from watchdog.core.process import ProcessIdentity
from watchdog.core.vocabulary import OnTimeout, Outcome, ProcessEnd, SigtermDisposition
from watchdog.core.workload import Workload


class SignalResult(str, enum.Enum):
    """What became of one attempt to signal a process (see `watchdog/host/signals.py`)."""

    SENT = "sent"
    GONE = "gone"  # no such process any more
    IDENTITY_CHANGED = "identity_changed"  # the PID now belongs to another process: not signalled
    DENIED = "denied"  # EPERM
    PROTECTED = "protected"  # PID 1, the daemon itself or a kernel thread: refused before any syscall


class End(str, enum.Enum):
    """How a process stopped being waited for."""

    EXITED = "exited"
    RELEASED = "released"  # closed the device and kept running: never killed
    GONE = "gone"  # vanished before it could be signalled
    IDENTITY_CHANGED = "identity_changed"  # its PID was reused before the signal: never signalled
    PROTECTED = "protected"  # PID 1, the daemon itself or a kernel thread: never signalled, not waited for


class Loss(str, enum.Enum):
    """Why a process of a finished drain lost its progress: the checkpoint SIGTERM asks for was not saved.
    A drain whose outcome is `exited` can still have lost it (a job that died of SIGTERM), so the record
    says so per process (`loss`) and in all (`lost_progress`), never only through the outcome."""

    KILLED = "killed"  # needed SIGKILL: still holding the device at the deadline
    SIGTERM_DEFAULT = "sigterm_default"  # died of SIGTERM's default action: no handler ran, nothing saved
    STILL_RUNNING = "still_running"  # still holding the device when the drain ended (on_timeout = leave)


@dataclass(frozen=True)
class ExitStatus:
    """How a process ended, as far as can be known: an exit code, a killing signal, or neither (unknown)."""

    code: int | None = None
    signal: int | None = None

    @classmethod
    def from_wait_status(cls, status: int) -> ExitStatus:
        """Decode a waitpid(2)-style status (also the form of field 52 of /proc/PID/stat)."""
        termsig = status & 0x7F
        if termsig == 0:
            return cls(code=(status >> 8) & 0xFF)
        return cls(signal=termsig)

    @property
    def known(self) -> bool:
        return self.code is not None or self.signal is not None

    @property
    def died_of_sigterm(self) -> bool:
        """Killed by SIGTERM's default action, or exit 143 (128 + 15: how a shell running the job reports
        a child that was): no handler ran, so no checkpoint was saved. A MaxText or JAX job SIGTERMed before
        its distributed initialisation (where the preemption handler is installed) ends so."""
        return self.signal == signal.SIGTERM or self.code == 128 + signal.SIGTERM

    @property
    def signal_name(self) -> str | None:
        """`SIGTERM` for the killing signal 15 (a number the enum lacks as `signal 40`); None without one."""
        return None if self.signal is None else signal_name(self.signal)

    def __str__(self) -> str:
        if self.code is not None:
            return f"exited {self.code}"
        if self.signal is not None:
            return f"killed by {self.signal_name}"
        return "unknown"


UNKNOWN_EXIT = ExitStatus()

BEFORE_RESTART = "before the restart"  # when an earlier run sent a signal, or a process ended, untimed


def rehearsal_forecast(sigterm: SigtermDisposition | None, asked_with_sigterm: bool) -> str:
    """A dry run's word on a process its ladder would have SIGKILLed (nothing was sent, so it ran on): what
    a real drain would have done, from its SIGTERM disposition seen before the drain, as `drill` says it."""
    if asked_with_sigterm and sigterm is SigtermDisposition.DEFAULT:
        return WOULD_DIE_OF_SIGTERM
    if asked_with_sigterm and sigterm is SigtermDisposition.IGNORED:
        return "SIGTERM ignored: a real drain would have SIGKILLed it"
    return "a real drain would have SIGKILLed it, unless its SIGTERM made it leave first"


WOULD_DIE_OF_SIGTERM = "no SIGTERM handler: a real drain's SIGTERM would have killed it at once, unsaved"

INFERRED_DEATH = (
    "died of SIGTERM's default action, inferred: its SIGTERM was at the default (no handler) when it was "
    "seen before the signal, so it saved no checkpoint (its exit status could not be read)"
)


class Death(str, enum.Enum):
    """How it is known that a process died of SIGTERM's default action."""

    SEEN = "seen"  # its exit status says so (killed by SIGTERM, or exit 143)
    INFERRED = "inferred"  # its exit status is unknown; its SIGTERM was at the default before the signal


@dataclass(frozen=True)
class SentSignal:
    signum: int
    at: float | None  # None: sent by an earlier run of the daemon (resumed drain)
    result: SignalResult


@dataclass
class ProcessRecord:
    """One process of the drain, from when it was first seen holding a device to how it ended."""

    identity: ProcessIdentity
    name: str
    devices: tuple[str, ...]
    first_seen: float
    signals: list[SentSignal] = field(default_factory=list)
    end: End | None = None
    ended_at: float | None = None
    exit_status: ExitStatus | None = None
    late_arrival: bool = False  # opened a device after the drain's first wave (e.g. a restarted job)
    uid: int | None = None  # its owner (the history names the user); None: not known
    sigterm: SigtermDisposition | None = None  # its SIGTERM disposition when first seen, before any signal
    workload: Workload | None = None  # its unit, container or pod when first seen; None: not known

    def sent(self, signum: int) -> list[SentSignal]:
        return [s for s in self.signals if s.signum == signum and s.result is SignalResult.SENT]

    @property
    def asked(self) -> SentSignal | None:
        """The ladder's asking signal as it went out (SIGTERM: every signal sent but SIGKILL), or None."""
        return next((s for s in self.signals if s.signum != KILL and s.result is SignalResult.SENT), None)

    @property
    def signalled_at(self) -> float | None:
        """When the asking signal went out (None if never, or if an earlier run of the daemon sent it)."""
        asked = self.asked
        return asked.at if asked is not None else None

    @property
    def killed(self) -> bool:
        return bool(self.sent(KILL))

    @property
    def pending(self) -> bool:
        return self.end is None

    @property
    def sigterm_death(self) -> Death | None:
        """Whether it died of SIGTERM's default action: SEEN in its exit status, or INFERRED when that
        status is unknown (its parent reaped it first: the usual case, the daemon is not its parent) from
        the disposition seen before the signal (default: nothing else can follow a SIGTERM)."""
        if self.end is not End.EXITED or self.killed:
            return None
        status = self.exit_status
        if status is not None and status.known:
            return Death.SEEN if status.died_of_sigterm else None
        # The disposition read is SIGTERM's: a ladder asking with another signal infers nothing.
        if self.sigterm is SigtermDisposition.DEFAULT and self.sent(signal.SIGTERM):
            return Death.INFERRED
        return None

    def forecast(self) -> str:
        """In a dry run: what a real drain would have done to it (`rehearsal_forecast`)."""
        return rehearsal_forecast(self.sigterm, any(s.signum == signal.SIGTERM for s in self.signals))

    def public_end(self, dry_run: bool = False) -> ProcessEnd:
        """Its end in the one vocabulary every surface shows (`ProcessEnd`): gone or reused before a
        signal counts as exited (it left on its own), protected as still running; in a dry run nothing was
        sent, so nothing was killed."""
        if self.killed and not dry_run:
            return ProcessEnd.KILLED
        if self.end in (End.EXITED, End.GONE, End.IDENTITY_CHANGED):
            return ProcessEnd.EXITED
        if self.end is End.RELEASED:
            return ProcessEnd.RELEASED
        return ProcessEnd.STILL_RUNNING

    def loss(self) -> Loss | None:
        """Why it lost its progress, once its drain is over (None: it kept it, or never had to save)."""
        if self.killed:
            return Loss.KILLED
        if self.sigterm_death is not None:
            return Loss.SIGTERM_DEFAULT
        if self.end is None:
            return Loss.STILL_RUNNING
        return None


@dataclass
class DrainRecord:
    """One drain: which it is and the event it serves, what it did to each process (`ProcessRecord`), its
    outcome. The one record every surface renders (the history entry, /status, the journal, webhooks).
    Times are monotonic seconds of the drain's clock; `wall()` turns them into wall-clock seconds. A drain
    known only from the lifecycle or the state file (its opening entry, a drain that will never finish) is
    a record too, kept on the wall clock (`opened`)."""

    started: float
    started_wall: float
    deadline: float
    on_timeout: OnTimeout
    dry_run: bool
    outcome: Outcome | None = None
    ended: float | None = None
    processes: dict[ProcessIdentity, ProcessRecord] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    late: bool = False  # reopened for late arrivals: it had ended, its events had not (`Lifecycle`)
    drain_id: str = ""  # the lifecycle's id of the drain (`ActiveDrain.drain_id`); a drill's: drill-...
    event_key: str = ""  # the key of the event it serves (its first), and that key's value
    event_value: str = ""
    event_ids: tuple[str, ...] = ()  # every event it serves (one joins a drain in progress)

    @classmethod
    def opened(
        cls, drain_id: str, started_wall: float, deadline_wall: float, on_timeout: OnTimeout, dry_run: bool,
        *, late: bool = False, event_key: str = "", event_value: str = "", event_ids: tuple[str, ...] = (),
    ) -> DrainRecord:  # fmt: skip
        """A drain with nothing done yet, on the wall clock (its monotonic times are wall times)."""
        return cls(
            started_wall, started_wall, deadline_wall, on_timeout, dry_run, late=late, drain_id=drain_id,
            event_key=event_key, event_value=event_value, event_ids=event_ids,
        )  # fmt: skip

    def wall(self, monotonic: float) -> float:
        """The wall-clock time of a monotonic instant of this drain."""
        return self.started_wall + (monotonic - self.started)

    def pending(self) -> list[ProcessIdentity]:
        return [i for i, p in self.processes.items() if p.pending]
