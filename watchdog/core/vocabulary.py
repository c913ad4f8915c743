"""The daemon's words, each defined once: its states, how a drain ends, the watched keys, the default graces.

They are public: metric label values, /status, the journal, hooks and the state file spell them, so
`surface/metrics.py` and the others derive theirs from here rather than writing them again. Pure.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal, get_args


class DaemonState(str, enum.Enum):
    """What the daemon is doing (the `tpu_watchdog_state` label, /status `state`)."""

    IDLE = "idle"
    DRAINING = "draining"
    DRAINED = "drained"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"


class Outcome(str, enum.Enum):
    """How one drain ended (the `tpu_watchdog_drains_total` label, /status `last_outcome`, hooks)."""

    EXITED = "exited"  # every holder exited or released the device before the deadline
    TIMED_OUT = "timed_out"
    NO_HOLDERS = "no_holders"
    CANCELLED = "cancelled"  # the event went away before the deadline: nothing was SIGKILLed
    INTERRUPTED = "interrupted"  # the daemon is stopping mid-drain; resume with the same deadline


class SigtermDisposition(str, enum.Enum):
    """What SIGTERM would do to a holder now, from /proc/PID/status (`holders`, /status `sigterm`, the
    `tpu_watchdog_device_holders_by_sigterm` label). Caught proves a handler, not a checkpoint."""

    CAUGHT = "caught"  # a handler runs (JAX's notifier after jax.distributed.initialize, or the job's own)
    IGNORED = "ignored"  # SIG_IGN: the process goes on as if nothing came, until the deadline's SIGKILL
    DEFAULT = "default"  # the kernel's default action: it dies at once, nothing saved


def disposition_of(text: object) -> SigtermDisposition | None:
    """A disposition as a file gives it (the state file, a history entry): None when absent, or a word
    this version does not know (a newer version's), never an error."""
    return next((d for d in SigtermDisposition if d.value == text), None)


# Why a holder's disposition is None: said by `readiness` and `drill` alike.
SIGTERM_UNKNOWN = "/proc/PID/status did not show its signal masks (run as root?)"


class ProcessEnd(str, enum.Enum):
    """How one process of a drain ended, the one word every surface uses (the history's and /status's
    `end`, the webhook's, the log line's): how it died, when known, is its exit status beside it."""

    EXITED = "exited"  # it exited (on SIGTERM, of SIGTERM's default action, or before being signalled)
    KILLED = "killed"  # SIGKILL went out: it never left on its own
    RELEASED = "released"  # it closed the device and kept running
    STILL_RUNNING = "still_running"  # it held a device when the drain ended (or a dry run sent it nothing)
    UNKNOWN = "unknown"  # the daemon could not see how it ended (the host restarted mid-drain)


class Output(str, enum.Enum):
    """What the daemon tells (the `tpu_watchdog_output_errors_total` label): each is told after the signal
    it is about and never stands in its way; a failure of one is caught and counted, never raised."""

    LOG = "log"  # a log line (the journal, stderr)
    METRICS = "metrics"  # a Prometheus series
    WEBHOOKS = "webhooks"  # a notice handed to the webhook sender
    HOOKS = "hooks"  # a site hook started
    HISTORY = "history"  # the drain history (history.jsonl)
    STATUS = "status"  # what /status and `tpu-watchdog status` show
    NOTIFY = "notify"  # sd_notify: READY, STATUS, WATCHDOG, STOPPING
    HTTP = "http"  # the listener of /metrics and /status (binding it)


# The outcomes of a drain that ended: an interrupted one is resumed by the next start, so it never is.
FINISHED_OUTCOMES: tuple[Outcome, ...] = tuple(o for o in Outcome if o is not Outcome.INTERRUPTED)

OnTimeout = Literal["kill", "leave"]  # at the deadline: SIGKILL what still holds a device, or only report
ON_TIMEOUT: tuple[OnTimeout, ...] = get_args(OnTimeout)
DEFAULT_ON_TIMEOUT: OnTimeout = "kill"


def as_on_timeout(text: str) -> OnTimeout:
    """`text` (a checked setting, a field of the state file) as an `OnTimeout`; ValueError if it is none."""
    for choice in ON_TIMEOUT:
        if text == choice:
            return choice
    raise ValueError(f"on_timeout must be {' or '.join(map(repr, ON_TIMEOUT))}, not {text!r}")


# A drill's drain in the history: `event` {key: DRILL_EVENT_KEY, value: DRILL_EVENT_VALUE}. Not a metadata
# path (those name a real event: instance/maintenance-event), so a rehearsal never reads as one.
DRILL_EVENT_KEY = "drill"
DRILL_EVENT_VALUE = "rehearsal"

# Who may read /status (pids, process names, devices): this host only, unless http.status_allow widens it.
LOOPBACK_NETWORKS: tuple[str, ...] = ("127.0.0.0/8", "::1/128")

DEFAULT_MAINTENANCE_GRACE = 300.0  # Cloud TPU: SIGTERM, then up to 5 minutes before maintenance proceeds
DEFAULT_PREEMPTION_GRACE = 25.0  # Spot and preemptible VMs get about 30 s


@dataclass(frozen=True)
class WatchedKey:
    """A metadata key the daemon watches: its `path` on the server, and the `source`, the short name the
    daemon gives it everywhere else (events, the state file, logs, hooks, the metrics' endpoint label)."""

    source: str

    @property
    def path(self) -> str:
        return f"instance/{self.source}"


MAINTENANCE_EVENT = WatchedKey("maintenance-event")
PREEMPTED = WatchedKey("preempted")
UPCOMING_MAINTENANCE = WatchedKey("upcoming-maintenance")
WATCHED_KEYS: tuple[WatchedKey, ...] = (MAINTENANCE_EVENT, PREEMPTED, UPCOMING_MAINTENANCE)


def source_of(key: str) -> str:
    """`instance/maintenance-event` -> `maintenance-event`: the name used in state, logs and metrics."""
    return key.rsplit("/", 1)[-1]
