"""The signal ladder: which signals a drain sends, and when, as data the drain's state machine walks.

A ladder is a list of steps. The first step asks: its signal goes to every process found holding a
device (the first wave, and each newcomer when a scan finds it), so that the framework saves a checkpoint
and exits. An optional second step forces: at the drain's deadline its signal goes to what still holds a
device. Without it the drain only reports what is left (on_timeout = "leave").

The forcing signal is always SIGKILL: the platform stops the host at the deadline anyway, and only a signal
that cannot be caught lets the drain wait a bounded time for the process to vanish (`kill_wait`). The
asking signal is SIGTERM for every framework the daemon knows (JAX's preemption notifier, Orbax, MaxText
and Pax all listen for it); another one (SIGINT, SIGUSR1) is one `Ladder` away, chosen by the policy. Pure.
"""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass

from watchdog.core.vocabulary import DEFAULT_ON_TIMEOUT, ON_TIMEOUT, OnTimeout

__all__ = [
    "ASK_SIGNALS",
    "DEFAULT_LADDER",
    "KILL",
    "KILL_NAME",
    "At",
    "Ladder",
    "Step",
    "ladder_for",
    "signal_name",
]

KILL = signal.SIGKILL  # the forcing step's signal: uncatchable, so its wait is bounded
KILL_NAME = KILL.name  # as the state file and the history spell it; every other signal they name asked
# What may ask: a signal a process can catch and that does not stop it outright (SIGSTOP) or ask a
# debugger (SIGTRAP). The real-time signals are left out on purpose: nothing the daemon drains listens there.
ASK_SIGNALS = frozenset(
    {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2}
)


class At(str, enum.Enum):
    """When a step's signal goes out."""

    FOUND = "found"  # when the process is found holding a device: the first wave, a newcomer's scan
    DEADLINE = "deadline"  # at the drain's deadline, to what still holds a device


@dataclass(frozen=True)
class Step:
    signum: int
    at: At

    @property
    def name(self) -> str:
        return signal_name(self.signum)


@dataclass(frozen=True)
class Ladder:
    """The steps of a drain, in order: one asking step (`At.FOUND`), then at most one forcing step
    (`At.DEADLINE`, SIGKILL). Checked once, here, so the state machine never meets a ladder it cannot walk."""

    steps: tuple[Step, ...]

    def __post_init__(self) -> None:
        if not self.steps or self.steps[0].at is not At.FOUND:
            raise ValueError(f"a ladder starts with a step at {At.FOUND.value!r}: {self.steps!r}")
        if self.steps[0].signum not in ASK_SIGNALS:
            allowed = ", ".join(sorted(signal_name(s) for s in ASK_SIGNALS))
            raise ValueError(f"a ladder's first signal must be one of {allowed}, not {self.steps[0].name}")
        rest = self.steps[1:]
        if len(rest) > 1 or any(s != Step(KILL, At.DEADLINE) for s in rest):
            raise ValueError(f"after its first step a ladder has at most SIGKILL at the deadline: {rest!r}")

    @property
    def ask(self) -> Step:
        """The step every holder gets when it is found."""
        return self.steps[0]

    @property
    def force(self) -> Step | None:
        """The deadline's step, or None: at the deadline the drain only reports what still holds a device."""
        return self.steps[1] if len(self.steps) > 1 else None

    @property
    def on_timeout(self) -> OnTimeout:
        """The setting that chose this ladder's deadline step: "kill" or "leave"."""
        return "kill" if self.force is not None else "leave"

    def then(self) -> str:
        """What the deadline does, for a log line: `SIGKILL what still holds a device` / `leave them`."""
        return f"{self.force.name} what still holds a device" if self.force else "leave them"


def ladder_for(on_timeout: OnTimeout, ask: int = signal.SIGTERM) -> Ladder:
    """The ladder of the `drain.on_timeout` setting: `ask` at once, then SIGKILL ("kill") or nothing."""
    if on_timeout not in ON_TIMEOUT:
        raise ValueError(f"on_timeout must be {' or '.join(map(repr, ON_TIMEOUT))}, not {on_timeout!r}")
    deadline = (Step(KILL, At.DEADLINE),) if on_timeout == "kill" else ()
    return Ladder((Step(ask, At.FOUND), *deadline))


DEFAULT_LADDER = ladder_for(DEFAULT_ON_TIMEOUT)  # SIGTERM, then SIGKILL at the deadline


def signal_name(signum: int) -> str:
    """`SIGTERM` for 15; a number the enum lacks (a real-time signal, 35-63) as `signal 40`."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
