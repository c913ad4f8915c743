"""The soak's verdicts, from ground truth only (bench/soak_facts.py): what the fake metadata server served
each daemon run (its request log: every answer for an event key, its value and when it went out), what each
holder received (it logs every SIGTERM itself), when each process died and how (the driver's reaper), and
when the driver started, stopped or killed each run and when the run said READY=1. All on one wall clock.
Never the daemon's log or state file: they say what it believed, and a missed event is one it never believed.

What a daemon run owes, on those facts:
- Served: a run is served an event by the first answer carrying the event's value to a request of that run
  (arrived after the run started, answered before it ended; an answer a fault spoiled aside), and served
  its clear by the first answer after the clear carrying the value back. The deadline is the event as first
  served to any run + the grace of the soak's config (a later run's first serving too, if the first run
  died within TERM_BOUND of it, before it surely wrote the event down).
- Admitted: from when a run may signal a process no earlier run SIGTERMed in this event: from its serving.
  A run started while the event was on file (an earlier run was served it, no run since was served the
  clear, or one was only as it was told to stop or died: then it may, need not) resumes the drain at once,
  for what earlier runs SIGTERMed; newcomers wait until it is served the
  event itself, or CONFIRM_WAIT after its start (after its READY=1, at the latest) if that is before the
  deadline (past the deadline, nobody new); the resumed drain takes them on at its next scan (RESCAN).
- SIGTERM: a process holding the device when its run is admitted gets its SIGTERM within TERM_BOUND of that;
  one opening later while the event is on (a late arrival), within RESCAN + TERM_BOUND of its open. A SIGKILL
  death in that time counts (past the deadline both go in one wave). Not owed once the run was served the
  clear, or the process stopped holding. A run that ended before it was due passes it to the next run, on
  the same rules, unless it ended after it was admitted to send it: it may have written the SIGTERM ahead
  and died before sending it, and the next run never sends it again (`possibly_sent`: excused; SIGKILLed
  only once that run is admitted, as a newcomer).
- SIGKILL: a process still holding at the deadline is SIGKILLed within KILL_TOLERANCE of it (a late arrival
  found after it: by when its SIGTERM was owed). With two possible deadlines (the first run died before it
  surely wrote the event down), within KILL_TOLERANCE of one of them, never in between. When the run up
  at the deadline ended or was told to stop by then + KILL_TOLERANCE, or was a restarted run still
  starting (no READY=1 yet), the run that goes on kills what earlier runs SIGTERMed as it resumes the
  drain, heard or not: from the deadline to its READY=1 + KILL_TOLERANCE (`restart_kills`, not timed
  against the deadline).
  None is owed, and none is allowed, once the run up was served the clear (TERM_BOUND for one in flight).
- Never: a SIGTERM no run could have sent (none up within IN_FLIGHT before its receipt was admitted for
  an event, or each had been served its clear over TERM_BOUND before), a second SIGTERM to a process in one
  event, a signal before its open; a SIGKILL outside its window. A daemon exits only when told; a graceful
  stop exits 0 within the driver's wait; the state dir is clean at the end.

TERM_BOUND is the promise the soak holds the daemon to, from the answer going out to the holder's handler
running (the daemon's parse, state write, scan, signal): the SIGKILL's allowance, since a stall of the
loaded machine delays both alike (three loaded soaks at once on 2 cores have shown ~1 s stalls), and
several times the p99 the soak's table shows, so a missed or late-heard event is a report and a stall is not.
"""

from __future__ import annotations

import signal
import statistics
from collections import Counter
from dataclasses import dataclass, field

from bench.soak_facts import KEYS, OFF, ON, Episode, Facts, HolderFacts, Instance, Served
from watchdog.daemon.newcomers import CONFIRM_WAIT
from watchdog.daemon.runner import RESCAN_INTERVAL

RESCAN = RESCAN_INTERVAL  # s between the daemon's scans while an event is on (a late arrival waits one)
TERM_BOUND = 1.0  # s from the event as served (or a late arrival's scan) to the holder's SIGTERM
IN_FLIGHT = 0.5  # s from a signal's sending to its receipt, at most: a run this long dead may have sent it
KILL_TOLERANCE = 1.0  # the issue's +-1 s
REACT = RESCAN + TERM_BOUND  # s a late arrival may hold the device before its SIGTERM is owed
SPOILED = ("fault:garbage", "fault:oversized", "fault:no_flavor")  # answers a daemon must refuse


@dataclass(frozen=True)
class Violation:
    at: float
    text: str


@dataclass
class Verdict:
    violations: list[Violation] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    kill_offsets: list[float] = field(default_factory=list)  # each timed SIGKILL's time minus its deadline
    term_latencies: list[float] = field(default_factory=list)  # SIGTERM receipt minus the event as served
    late_term_latencies: list[float] = field(default_factory=list)  # a late arrival's, minus its open


def check(facts: Facts) -> Verdict:
    return _Checker(facts).run()


def percentiles(values: list[float]) -> tuple[float, float, float] | None:
    """p50, p99 and max (the table's SIGTERM latency)."""
    if not values:
        return None
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return statistics.median(ordered), p99, ordered[-1]


@dataclass
class Knowledge:
    """One run's view of one event, from what it was served."""

    run: Instance
    served: float | None  # the first answer with the event's value
    clear: float | None  # the first answer after the clear with the value back
    restored: bool = False  # started with the event on file
    doubtful: bool = False  # maybe on file: the run before was served the clear just as it stopped or died
    admits: float | None = None  # newcomers may be signalled from (the earliest reading of the wait)
    owes: float | None = None  # newcomers must be signalled from (the latest reading)

    @property
    def ended(self) -> float:
        return self.run.ended if self.run.ended is not None else float("inf")

    def up(self, at: float) -> bool:
        return self.run.started <= at < self.ended


@dataclass(frozen=True)
class Window:
    """When a holder's SIGKILL may come (lo..hi, give or take KILL_TOLERANCE); owed: it must."""

    lo: float
    hi: float
    owed: bool
    timed: bool  # judged against the deadline (not a restart's resume, not a late arrival past it)
    restart: bool  # due as the next run resumed the drain: none ran through the deadline
    deadlines: tuple[float, ...]
    found: float | None = None  # a newcomer to its run: by when that run surely found it (then kills it)


class _Checker:
    def __init__(self, facts: Facts) -> None:
        self.facts = facts
        self.verdict = Verdict()
        self.knowledge = {e.index: self.views(e) for e in facts.episodes}
        self.dues = {e.index: self.deadlines(e, self.knowledge[e.index]) for e in facts.episodes}
        self.terms: dict[tuple[int, int], list[float]] = {}  # (holder serial, episode index) -> receipts
        self.unsure: set[tuple[int, int]] = set()  # (serial, episode): SIGTERM maybe sent, never received

    def run(self) -> Verdict:
        if not self.facts.served_complete:
            self.flag(self.facts.end, "the fake's request log overflowed: what was served is not all known")
        for holder in self.facts.holders:
            self.receipts(holder)
        for holder in self.facts.holders:
            for episode in self.facts.episodes:
                self.owed_term(holder, episode)
            self.kills(holder)
            self.verdict.counts["jobs_after_clear_signalled"] += self.signalled_after_clear(holder)
        self.verdict.counts["clears_while_down"] = sum(e.cleared_while_down for e in self.facts.episodes)
        self.daemons()
        self.verdict.violations.sort(key=lambda v: v.at)
        return self.verdict

    def flag(self, at: float, text: str) -> None:
        self.verdict.violations.append(Violation(at, f"t+{at - self.facts.t0:.2f} s: {text}"))

    def t(self, at: float) -> str:
        return f"t+{at - self.facts.t0:.2f}"

    # -- what each run was served ----------------------------------------------------------------------

    def answers(self, run: Instance, path: str, value: str, after: float) -> float | None:
        """The first answer to this run's requests for `path` carrying `value`, after `after`."""
        ended = run.ended if run.ended is not None else float("inf")
        times = [s.answered for s in self.facts.served if s.path == path and _good(s, value)
                 and s.arrived >= run.started and after <= s.answered <= ended]  # fmt: skip
        return min(times, default=None)

    def views(self, episode: Episode) -> list[Knowledge]:
        key, until = KEYS[episode.source], self.next_start(episode)
        runs = [i for i in self.facts.instances
                if i.started < until and (i.ended is None or i.ended > episode.started)]  # fmt: skip
        views, on_file = [], "no"  # the event in the state file: "yes", "no" or "maybe"
        for run in runs:
            # (An answer may finish after the clear, a trickle taken before it: the daemon had it then.)
            served = self.answers(run, key, ON[episode.source], episode.started)
            served = served if served is not None and served < until else None
            clear = None
            if episode.cleared is not None:
                clear = self.answers(run, key, OFF[episode.source], episode.cleared)
            views.append(Knowledge(run, served, clear, restored=on_file != "no", doubtful=on_file == "maybe"))
            on_file = "yes" if served is not None else on_file
            if clear is not None and on_file != "no":
                # A clear served as the run was told to stop (or died) may never have reached its state file.
                gone = min(run.told_at or float("inf"), run.ended or float("inf"))
                on_file = "maybe" if clear + TERM_BOUND > gone else "no"
        deadlines = self.deadlines(episode, views)
        for view in views:
            wait_from, wait_to = (
                view.run.started + CONFIRM_WAIT,
                (view.run.ready or view.ended) + CONFIRM_WAIT,
            )
            first = deadlines[0] if deadlines else float("inf")
            waits = (wait_from if wait_from < first else None, wait_to if wait_to < first else None)
            admits, owes = (view.served, view.served) if not view.restored else (
                _min(view.served, waits[0]), _min(view.served, waits[1]))  # fmt: skip
            if view.clear is not None:  # the clear first: nobody new after it
                admits = admits if admits is not None and admits < view.clear else None
                owes = owes if owes is not None and owes < view.clear else None
            view.admits, view.owes = admits, None if view.doubtful else owes
        return views

    def deadlines(self, episode: Episode, views: list[Knowledge]) -> tuple[float, ...]:
        """The event as first served + the grace; a later run's too while the run served it died within
        TERM_BOUND of that (before it surely wrote it down)."""
        found: list[float] = []
        for view in views:
            if view.served is None:
                continue
            found.append(view.served + episode.grace)
            if view.ended >= view.served + TERM_BOUND:
                break
        return tuple(found)

    def next_start(self, episode: Episode) -> float:
        later = [e.started for e in self.facts.episodes if e.index > episode.index]
        return min(later, default=float("inf"))

    def episode_at(self, at: float) -> Episode | None:
        return next((e for e in reversed(self.facts.episodes) if e.started <= at), None)

    # -- SIGTERM ---------------------------------------------------------------------------------------

    def receipts(self, holder: HolderFacts) -> None:
        name = _name(holder)
        for at in holder.terms:
            self.verdict.counts["sigterms"] += 1
            if holder.opened is not None and at < holder.opened:
                self.flag(at, f"{name} received a SIGTERM before it opened the device")
            episode = self.episode_at(at)
            why = self.forbidden_term(holder, episode, at) if episode is not None else "outside any event"
            if why:
                self.flag(at, f"SIGTERM to {name} {why}")
            if episode is None:
                continue
            if holder.released is not None and holder.released < episode.started:
                self.flag(at, f"SIGTERM to {name}, which had released the device before the "
                              f"{self.describe(episode)}")  # fmt: skip
            got = self.terms.setdefault((holder.serial, episode.index), [])
            got.append(at)
            if len(got) == 2:
                self.flag(at, f"second SIGTERM to {name} in the {self.describe(episode)} (first at "
                              f"{self.t(got[0])} s)")  # fmt: skip

    def forbidden_term(self, holder: HolderFacts, episode: Episode, at: float) -> str:
        """Why no run could send this SIGTERM ("" if one could): each run up when it may have been sent (at
        most IN_FLIGHT before its receipt) was not admitted, or had been served the clear."""
        senders = [v for v in self.knowledge[episode.index]
                   if v.run.started <= at and v.ended >= at - IN_FLIGHT]  # fmt: skip
        if not senders:
            return f"while no daemon ran, in the {self.describe(episode)}"
        reasons = [self.not_admitted(v, episode, at) for v in senders]
        return "" if "" in reasons else reasons[-1]

    def not_admitted(self, view: Knowledge, episode: Episode, at: float) -> str:
        run, event = f"daemon #{view.run.index}", self.describe(episode)
        if view.clear is not None and at > view.clear + TERM_BOUND:
            return f"{at - view.clear:.1f} s after {run} was served the clear of the {event}"
        if view.admits is not None and view.admits <= at:
            return ""
        if view.restored and view.served is None:
            return (f"by {run}, which resumed the {event} from its state file and was never served it: it "
                    "signalled a newcomer without a fresh metadata answer")  # fmt: skip
        return f"by {run} before it was served the {event}"

    def owed_term(self, holder: HolderFacts, episode: Episode) -> None:
        """The SIGTERM a holder was owed in this event, and its latency; see the module's rules."""
        if holder.opened is None:
            return
        until = holder.stopped_holding or self.facts.end
        cleared = episode.cleared or self.facts.end
        if holder.opened >= cleared or until <= episode.started:
            return
        signals = sorted(self.terms.get((holder.serial, episode.index), []) + self.killed_in(holder, episode))
        first = signals[0] if signals else None
        views = self.knowledge[episode.index]
        admitted = [v.served for v in views if v.served is not None]
        late = bool(admitted) and holder.opened > min(admitted)
        self.verdict.counts["late_arrivals"] += late
        self.verdict.counts["late_arrivals_signalled"] += late and first is not None
        for view in views:
            if view.owes is None or view.owes >= cleared:
                continue
            start = max(view.owes, holder.opened)
            after_open = holder.opened > view.owes
            due = self.found(holder, view)
            if first is not None and first <= due:
                if after_open:
                    self.verdict.late_term_latencies.append(round(first - holder.opened, 3))
                elif view.owes == view.served:
                    self.verdict.term_latencies.append(round(first - view.owes, 3))
                return
            if until <= due or (view.clear is not None and view.clear <= due):
                return  # it let go, or the run was served the clear, before the SIGTERM was due
            if view.ended < due:
                if view.ended >= start:  # it may have written the SIGTERM ahead and died before sending
                    self.verdict.counts["possibly_sent"] += 1
                    self.unsure.add((holder.serial, episode.index))
                    return
                continue  # gone before it could: the next run owes it
            served = (
                f"daemon #{view.run.index} was served the {self.describe(episode)} at {self.t(view.owes)} s"
            )
            what = (
                f"it opened it at {self.t(holder.opened)} s (a late arrival; {served})"
                if after_open
                else served
            )
            got = f"its first signal came {first - start:.2f} s after" if first is not None else "no SIGTERM"
            self.flag(due, f"{_name(holder)} still held the device {due - start:.1f} s after {what}; {got}")
            return

    def killed_in(self, holder: HolderFacts, episode: Episode) -> list[float]:
        died = self.sigkilled(holder)
        return [died] if died is not None and self.episode_at(died) is episode else []

    def signalled_after_clear(self, holder: HolderFacts) -> bool:
        """A clear-while-down's new job got a signal before the next event: it should have got none."""
        if not holder.after_clear or holder.opened is None:
            return False
        later = [e.started for e in self.facts.episodes if e.started > holder.opened]
        until = min(later, default=float("inf"))
        killed = self.sigkilled(holder)
        return any(t < until for t in holder.terms) or (killed is not None and killed < until)

    # -- SIGKILL ---------------------------------------------------------------------------------------

    def sigkilled(self, holder: HolderFacts) -> float | None:
        return holder.died if holder.exit_code == -signal.SIGKILL and not holder.culled else None

    def kills(self, holder: HolderFacts) -> None:
        name, died = _name(holder), self.sigkilled(holder)
        if died is not None:
            self.verdict.counts["sigkills"] += 1
            episode = self.episode_at(died)
            window = self.window(holder, episode) if episode is not None else None
            if episode is None or window is None:
                self.flag(died, f"SIGKILL of {name} outside any event's SIGKILL window")
            else:
                self.kill(holder, episode, window, died)
        for episode in self.facts.episodes:
            window = self.window(holder, episode)
            if window is None or not window.owed or (died is not None and self.episode_at(died) is episode):
                continue
            until, latest = holder.stopped_holding or self.facts.end, window.hi + KILL_TOLERANCE
            if until > latest and self.facts.end > latest:
                due = f"{KILL_TOLERANCE:.0f} s after its SIGKILL was due (the {self.describe(episode)})"
                self.flag(latest, f"{name} still held the device {due} and was not SIGKILLed")

    def kill(self, holder: HolderFacts, episode: Episode, window: Window, died: float) -> None:
        self.verdict.counts["killed_without_sigterm"] += not self.terms.get((holder.serial, episode.index))
        name, inside = _name(holder), window.lo - KILL_TOLERANCE <= died <= window.hi + KILL_TOLERANCE
        if not inside:
            side = "before" if died < window.lo else "after"
            edge = window.lo if died < window.lo else window.hi
            self.flag(died, f"SIGKILL of {name} {abs(died - edge):.2f} s {side} its window "
                            f"{self.t(window.lo)}..{self.t(window.hi)} s (+-{KILL_TOLERANCE:.0f} s; deadline "
                            f"{self.t(window.deadlines[0])} s, the {self.describe(episode)})")  # fmt: skip
        if not window.timed:
            self.verdict.counts["restart_kills" if window.restart else "late_kills_untimed"] += 1
            return
        # Due at a deadline (which of them depends on what reached the state file), or, for a newcomer its
        # run found past a deadline, as it was found: not anywhere between two deadlines far apart.
        offset, found = min((died - d for d in window.deadlines), key=abs), window.found
        if abs(offset) > KILL_TOLERANCE and found is not None and died <= found + KILL_TOLERANCE:
            self.verdict.counts["late_kills_untimed"] += 1
            return
        self.verdict.kill_offsets.append(round(offset, 3))
        if inside and abs(offset) > KILL_TOLERANCE:
            dues = ", ".join(f"{self.t(d)} s" for d in window.deadlines)
            self.flag(died, f"SIGKILL of {name} {abs(offset):.2f} s from its deadline, "
                            f"+-{KILL_TOLERANCE:.0f} s ({dues}, the {self.describe(episode)})")  # fmt: skip

    def window(self, holder: HolderFacts, episode: Episode) -> Window | None:
        """When this holder's SIGKILL may come in this event, and whether it must; None: it may not."""
        views, deadlines = self.knowledge[episode.index], self.dues[episode.index]
        if not deadlines or holder.opened is None:
            return None
        first, last = deadlines[0], deadlines[-1]
        going = [v for v in views if v.ended > first + KILL_TOLERANCE
                 and (v.run.told_at is None or v.run.told_at > first + KILL_TOLERANCE)]  # fmt: skip
        if not going:
            return None
        view = going[0]  # the run that goes on past the deadline (the one before was killed or told to stop)
        # It kills at the deadline if it was up with the event by then; one still starting (restored, not
        # READY yet) kills as it resumes the drain: after its start, by READY=1.
        restart = not view.up(first) or (view.restored and (view.run.ready is None or view.run.ready > first))
        lo, hi = first, last
        if restart:
            hi = max(last, min(view.run.ready if view.run.ready is not None else view.ended, view.ended))
        if view.clear is not None and holder.opened > view.clear:
            return None  # it came after the run was served the clear
        terms = self.terms.get((holder.serial, episode.index), [])
        unsure = (holder.serial, episode.index) in self.unsure
        found: float | None = None
        # After the clear: allowed while unheard. A run that maybe has it on file may kill; it need not.
        owed = holder.opened < (episode.cleared or self.facts.end) and not view.doubtful
        # The run up at the deadline, killed or told to stop just after, may have killed then.
        dying = any(v.up(first) for v in views if v is not view)
        if not view.restored and view.served is None:  # it knows nothing of the event (a clear went before)
            return Window(first, first, False, False, True, deadlines) if dying else None
        if unsure or not any(t < view.run.started for t in terms):  # new to this run: once it is admitted
            if view.admits is None:  # never admitted: nobody new past the deadline
                return Window(first, first, False, False, True, deadlines) if dying else None
            lo = max(lo, view.admits)
            found = self.found(holder, view, view.admits if view.owes is None else None)
            hi, owed = max(hi, found), owed and view.owes is not None
        lo = first if dying else lo
        if view.clear is not None and view.clear <= hi + KILL_TOLERANCE:
            if view.clear + TERM_BOUND < lo:
                return None  # served the clear first: nothing is SIGKILLed
            hi, owed = max(lo, min(hi, view.clear + TERM_BOUND)), False
        timed = not restart and hi <= last
        return Window(lo, hi, owed, timed, restart, deadlines, found)

    def found(self, holder: HolderFacts, view: Knowledge, admitted: float | None = None) -> float:
        """By when a run admitted at `admitted` (its `owes`) has surely signalled this holder: a late arrival
        (or a newcomer a resumed drain held back) waits for the next scan (RESCAN), then the wave."""
        admitted = view.owes if admitted is None else admitted
        assert admitted is not None
        opened = holder.opened if holder.opened is not None else admitted
        scan = RESCAN if opened > admitted or view.restored else 0.0
        return max(opened, admitted) + scan + TERM_BOUND

    # -- the daemons themselves ------------------------------------------------------------------------

    def daemons(self) -> None:
        for instance in self.facts.instances:
            if instance.ended is not None and instance.told is None:
                self.flag(
                    instance.ended, f"daemon #{instance.index} exited by itself with {instance.exit_code}"
                )
            if instance.told in ("stop", "final") and instance.ended is not None and instance.exit_code != 0:
                if instance.exit_code == -signal.SIGTERM and not self.asked(instance):
                    # Stopped while the interpreter was still starting, before the daemon's code could
                    # block the signal: nothing was begun, and systemd counts a SIGTERM death a clean stop.
                    self.verdict.counts["stopped_before_its_code_ran"] += 1
                    continue
                stop = f"daemon #{instance.index}'s graceful stop exited {instance.exit_code}"
                self.flag(instance.ended, stop)
            if instance.stop_timed_out:
                self.flag(
                    instance.ended or self.facts.end, f"daemon #{instance.index} did not stop within 20 s"
                )
        if not self.facts.final_clean:
            self.flag(self.facts.end, f"state not clean 30 s after the last clear: {self.facts.final_state}")
        if self.facts.leftovers:
            self.flag(self.facts.end, f"temporary files left in the state dir: {self.facts.leftovers}")

    def asked(self, run: Instance) -> bool:
        """This run asked the fake for an event key: its code ran (its first act after blocking SIGTERM)."""
        ended = run.ended if run.ended is not None else float("inf")
        return any(run.started <= s.arrived <= ended for s in self.facts.served)

    def describe(self, episode: Episode) -> str:
        return f"{episode.source} event #{episode.index} of t+{episode.started - self.facts.t0:.1f} s"


def _good(served: Served, value: str) -> bool:
    return served.status == 200 and served.note not in SPOILED and served.value.strip() == value


def _min(*values: float | None) -> float | None:
    return min((v for v in values if v is not None), default=None)


def _name(holder: HolderFacts) -> str:
    return f"pid {holder.pid} (holder #{holder.serial}, {holder.mode})"
