"""What a soak records, each fact timed where it happens, and the parsers of the two logs it reads.

Ground truth, all on one wall clock: the driver's own timeline (events set and cleared on the fake, daemons
started, stopped and killed, holders spawned); what the fake served (its request log: each answer to an
event key, its value and when it went out); the holders' log, where each holder appends a line for every
SIGTERM it receives, timed by the holder; deaths, timed by the driver's reaper the moment waitpid returns;
each daemon's READY=1. Each daemon's log (one file per run) is kept for the timeline a person reads, never
as evidence. `bench/soak_checker.py` judges them; `timeline` shows them around a moment; `facts_json` /
`load_facts` keep them for judging again.
"""

from __future__ import annotations

import datetime
import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

KEYS = {"preempted": "instance/preempted", "maintenance": "instance/maintenance-event"}
ON = {"preempted": "TRUE", "maintenance": "TERMINATE_ON_HOST_MAINTENANCE"}
OFF = {"preempted": "FALSE", "maintenance": "NONE"}


@dataclass
class Episode:
    """One event as the driver set it on the fake metadata server."""

    index: int
    source: str  # "preempted" or "maintenance"
    started: float  # just before the fake was told
    grace: float  # the soak's config for this source: the deadline is the event as first served + this
    cleared: float | None = None  # just after the fake was told
    cleared_while_down: bool = False  # cleared while no daemon was running
    # (seen at, deadline) on each change of the state file: the driver paces its episodes by it, no verdict.
    deadlines: list[tuple[float, float]] = field(default_factory=list)

    @property
    def deadline(self) -> float | None:
        """The first deadline the state file showed for this event (for the driver's pacing)."""
        return self.deadlines[0][1] if self.deadlines else None


@dataclass(frozen=True)
class Served:
    """One answer of the fake to a request for an event key (watchdog/fake/requestlog.py)."""

    arrived: float
    answered: float
    path: str
    status: int
    value: str
    note: str = ""


@dataclass(frozen=True)
class LogLine:
    """One line of a daemon's log. `resolution`: how coarse its time is (0 for JSON; 1 s for the text
    format, whose time is truncated to the second)."""

    at: float
    kind: str | None
    message: str
    fields: dict[str, object]
    instance: int
    resolution: float = 0.0

    def get(self, key: str) -> object:
        return self.fields.get(key)


@dataclass
class Instance:
    """One run of the daemon."""

    index: int
    pid: int
    started: float
    log_path: Path
    ready: float | None = None  # its READY=1, by its PID (SO_PASSCRED)
    ended: float | None = None  # reaped
    exit_code: int | None = None  # as Popen.returncode: -9 for SIGKILL
    told: str | None = None  # "kill", "stop" or "final": the driver ended it; None: it ended by itself
    told_at: float | None = None  # when the driver sent its kill -9 or SIGTERM
    stop_timed_out: bool = False
    lines: list[LogLine] = field(default_factory=list)


@dataclass
class HolderFacts:
    """One holder process: what it said (opened, each SIGTERM, released) and how it ended."""

    serial: int
    pid: int
    mode: str  # handled (exits on SIGTERM), report (carries on holding), release (closes the device)
    spawned: float
    late: bool = False  # the driver's late arrival: opened during an event after its first holders had gone
    after_clear: bool = False  # the new job of a clear-while-down episode
    opened: float | None = None  # just before its open() of the device
    start_time: int | None = None  # /proc/PID/stat field 22: its identity with the PID
    terms: list[float] = field(default_factory=list)
    released: float | None = None
    died: float | None = None
    exit_code: int | None = None
    culled: bool = False  # killed by the driver, not the daemon

    @property
    def stopped_holding(self) -> float | None:
        ends = [t for t in (self.released, self.died) if t is not None]
        return min(ends) if ends else None


@dataclass
class Facts:
    t0: float
    end: float = 0.0
    episodes: list[Episode] = field(default_factory=list)
    instances: list[Instance] = field(default_factory=list)
    holders: list[HolderFacts] = field(default_factory=list)
    actions: list[tuple[float, str]] = field(default_factory=list)  # the driver's own timeline
    served: list[Served] = field(default_factory=list)
    served_complete: bool = True  # False: the fake's request log overflowed, the oldest answers are lost
    final_state: dict[str, object] | None = None
    final_clean: bool = True
    leftovers: list[str] = field(default_factory=list)


def facts_json(facts: Facts) -> str:
    """The facts as JSON, for a person reading the evidence of a run."""
    return json.dumps(asdict(facts), default=str, indent=1)


def load_facts(text: str) -> Facts:
    """`facts_json`'s output back (to judge a run's evidence again)."""
    data = json.loads(text)
    facts = Facts(data["t0"], data["end"], final_state=data["final_state"], final_clean=data["final_clean"])
    facts.actions, facts.leftovers = [(t, a) for t, a in data["actions"]], data["leftovers"]
    facts.served, facts.served_complete = [Served(**s) for s in data["served"]], data["served_complete"]
    for e in data["episodes"]:
        facts.episodes.append(Episode(**{**e, "deadlines": [(seen, at) for seen, at in e["deadlines"]]}))
    for i in data["instances"]:
        lines = [LogLine(**line) for line in i["lines"]]
        facts.instances.append(Instance(**{**i, "log_path": Path(i["log_path"]), "lines": lines}))
    facts.holders = [HolderFacts(**h) for h in data["holders"]]
    return facts


CONTEXT = 5.0  # +- s of timeline printed around a violation


def timeline(facts: Facts, at: float, span: float = CONTEXT) -> list[str]:
    """Everything recorded within `span` s of `at`, in time order: driver, holders, daemons."""
    rows: list[tuple[float, str, str]] = [
        (t, "driver", text) for t, text in facts.actions
    ]  # (time, who, what)
    rows += [(s.answered, "fake", f"served {s.path} = {s.value[:40]!r}" + (f" ({s.note})" if s.note else ""))
             for s in facts.served if s.status == 200]  # fmt: skip
    for h in facts.holders:
        who = f"holder #{h.serial} pid {h.pid}"
        rows += [(t, who, "received SIGTERM") for t in h.terms]
        rows += [(t, who, what) for t, what in ((h.opened, "opened the device"), (h.released, "released it"))
                 if t is not None]  # fmt: skip
        if h.died is not None:
            rows.append(
                (h.died, who, f"reaped: exit {h.exit_code}" + (" (by the driver)" if h.culled else ""))
            )
    for instance in facts.instances:
        if instance.ready is not None:
            rows.append((instance.ready, f"daemon #{instance.index}", "READY=1"))
        for line in instance.lines:  # "~": a text-format line, timed to the second
            extra = {k: v for k, v in line.fields.items() if k != "severity" and not line.resolution}
            mark = "~" if line.resolution else ""
            text = f"{mark}[{line.kind or '-'}] {line.message} {extra or ''}"
            rows.append((line.at, f"daemon #{instance.index}", text))
    near = sorted((r for r in rows if abs(r[0] - at) <= span), key=lambda r: r[0])
    return [f"  t+{t - facts.t0:9.3f}  {who:<22} {text}".rstrip() for t, who, text in near]


# -- the holders' log: "SERIAL PID WHAT TIME [START_TIME]" per line ---------------------------------------


def read_holder_lines(data: bytes, holders: dict[int, HolderFacts]) -> None:
    """Apply complete lines of the holders' log to their facts (by serial)."""
    for line in data.decode().splitlines():
        parts = line.split()
        holder = holders.get(int(parts[0]))
        if holder is None:
            continue
        what, at = parts[2], float(parts[3])
        if what == "open":
            holder.opened, holder.start_time = at, int(parts[4])
        elif what == "term":
            holder.terms.append(at)
        elif what == "release":
            holder.released = at


# -- the daemon's log ------------------------------------------------------------------------------------


def parse_daemon_log(text: str, instance: int) -> list[LogLine]:
    """Every line of one daemon run's stderr: JSON lines (`--log-format json`) or the text format."""
    lines: list[LogLine] = []
    for raw in text.splitlines():
        line = _json_line(raw, instance) or _text_line(raw, instance)
        if line is None:  # a traceback's continuation: timed as the line it follows
            at, res = (lines[-1].at, lines[-1].resolution) if lines else (0.0, 0.0)
            line = LogLine(at, None, raw, {}, instance, res)
        lines.append(line)
    return lines


def _json_line(raw: str, instance: int) -> LogLine | None:
    if not raw.startswith("{"):
        return None
    try:
        data = json.loads(raw)
        at = datetime.datetime.fromisoformat(str(data["time"]).replace("Z", "+00:00")).timestamp()
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(data, dict):
        return None
    kind = data.get("kind")
    rest = {k: v for k, v in data.items() if k not in ("time", "kind", "message")}
    for key in ("pid", "start_time"):  # joined with the holders' integers
        if isinstance(rest.get(key), str) and str(rest[key]).isdigit():
            rest[key] = int(str(rest[key]))
    return LogLine(at, kind if isinstance(kind, str) else None, str(data.get("message", "")), rest, instance)


# The text format (before `--log-format json`): "%Y-%m-%dT%H:%M:%S LEVEL message", local time, to the second.
_TEXT = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d) (\w+) (.*)$")
_TEXT_KINDS = (
    (re.compile(r"^(?:\[dry run\] )?(?P<signal>SIG\w+) to pid (?P<pid>\d+) \((?P<process>.*), start time "
                r"(?P<start_time>\d+)(?:, [^)]*)?\): (?P<result>\w+)$"), "signal_sent"),  # ", <workload>"
    (re.compile(r"^event started: (?P<event>\S+) = "), "event_started"),
    (re.compile(r"^event cleared: (?P<event>\S+) is back"), "event_cleared"),
    (re.compile(r"^draining \d+ TPU holder"), "drain_started"),
    (re.compile(r"^drain (?P<outcome>exited|no_holders|timed_out|cancelled|interrupted)\b"),
     "drain_finished"),
    (re.compile(r"^resuming the drain"), "state_recovered"),
    (re.compile(r"^tpu-watchdog started"), "daemon_started"),
)  # fmt: skip


def _text_line(raw: str, instance: int) -> LogLine | None:
    match = _TEXT.match(raw)
    if match is None:
        return None
    at = time.mktime(time.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S"))
    message = match.group(3)
    for pattern, kind in _TEXT_KINDS:
        found = pattern.match(message)
        if found:
            values: dict[str, object] = dict(found.groupdict())
            for key in ("pid", "start_time"):
                if key in values:
                    values[key] = int(str(values[key]))
            return LogLine(at, kind, message, {"severity": match.group(2), **values}, instance, 1.0)
    return LogLine(at, None, message, {"severity": match.group(2)}, instance, 1.0)


@dataclass
class Result:
    seconds: float
    seed: int
    load: bool = False
    log_format: str = "text"
    events: int = 0
    sigterms: int = 0
    sigkills_seen: int = 0
    killed_without_sigterm: int = 0  # SIGKILLed with no SIGTERM received for that event (came just before)
    faults: int = 0
    crashes: int = 0
    graceful_restarts: int = 0
    holders: int = 0
    late_arrivals: int = 0  # the driver's late-arrival episodes
    late_arrivals_seen: int = 0  # holders the checker found opening during an event after its drain began
    late_arrivals_signalled: int = 0
    clears_while_down: int = 0
    jobs_after_clear_signalled: int = 0  # must be 0
    possibly_sent: int = 0  # SIGTERMs owed when their daemon ended: maybe written ahead, never sent (excused)
    cpu_busy_percent: float = 0.0  # of all cores, over the run
    rss_kib: list[int] = field(default_factory=list)  # idle samples of the long-lived second-half daemon
    fds: list[int] = field(default_factory=list)
    peak_rss_kib: int = 0
    kill_offsets_s: list[float] = field(default_factory=list)  # each SIGKILL's time minus its due time
    restart_kills: int = 0  # SIGKILLs due while no daemon ran: sent by the next one as it resumed
    term_latencies_s: list[float] = field(default_factory=list)  # SIGTERM receipt minus the event as served
    late_term_latencies_s: list[float] = field(default_factory=list)  # a late arrival's: minus its open
    violations: list[str] = field(default_factory=list)
    timelines: list[str] = field(default_factory=list)  # around the first violations
    evidence: str | None = None  # where the logs were kept (only when something was violated)
