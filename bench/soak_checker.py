"""The soak's verdicts, from ground truth: the holders' receipts, the reaper's deaths, the daemons' own logs
and the driver's timeline of events (bench/soak_facts.py), joined by PID (and start time) and time.

Rules (each breach is a `Violation`, printed with the timeline around it):
- every SIGTERM a holder receives is one a daemon's log names (nothing else on the machine signals it), comes
  during an event (or within CLEAR_SLACK of its clear, or later while the sender's log shows it has not
  heard of the clear yet), from a daemon that was running when the event cleared (a daemon started after
  the clear must wait for a fresh metadata answer), to a process holding the device; at most one per
  process per event;
- every process that holds the device for REACT s while an event is on and a daemon knows it (its log says
  so) gets its SIGTERM, a late arrival (opened after the drain's first signals) too; only a crash that left
  the SIGTERM as an unconfirmed write-ahead intent excuses it;
- a process still holding at the deadline is SIGKILLed within KILL_TOLERANCE of its due time: the deadline,
  or, when no daemon knew of the event then, the moment one does (`held_back`: never); none outside an event;
- the deadline never moves later; an event that outlived its deadline is marked drained (no drain lost);
  no daemon exits unbidden; a graceful stop exits 0; the state is clean at the end.

A SIGKILL's time is the earliest evidence of it: the reaper's waitpid or the daemon's own log line, so a late
reaper (the driver's timing) is told apart from a late daemon; the message gives both.
"""

from __future__ import annotations

import signal
from collections import Counter
from dataclasses import dataclass, field

from bench.soak_facts import (
    HEARD,
    Episode,
    Facts,
    HolderFacts,
    Instance,
    LogLine,
    beliefs,
    confirmed,
    held_back,
    restored,
)

CLEAR_SLACK = 6.0  # s after a clear in which a signal may still go out (faults can delay hearing of it)
KILL_TOLERANCE = 1.0  # the issue's +-1 s
REACT = 2.5  # s a holder may hold the device, with an event on and known, before its SIGTERM is owed
MATCH = 5.0  # most s between a signal's daemon log line and its receipt


@dataclass(frozen=True)
class Violation:
    at: float
    text: str


@dataclass
class Verdict:
    violations: list[Violation] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    kill_offsets: list[float] = field(default_factory=list)  # each SIGKILL's time minus its due time


def check(facts: Facts) -> Verdict:
    return _Checker(facts).run()


class _Checker:
    def __init__(self, facts: Facts) -> None:
        self.facts = facts
        self.verdict = Verdict()
        self.used: set[int] = set()  # ids of daemon log lines already joined to a receipt or a death
        # What each daemon knew, for SIGTERMs owed to newcomers: a restarted daemon's knowledge of the
        # event on file counts from its confirmation (or the end of the wait): it signals nobody new before.
        self.beliefs = [
            (max(start, confirmed(i)) if restored(i, start) else start, end, i.index)
            for i in facts.instances
            for start, end in beliefs(i, facts.end)
        ]
        self.terms: dict[tuple[int, int], list[float]] = {}  # (holder serial, episode index) -> receipts
        self.sent: dict[tuple[object, object], list[LogLine]] = {}  # (pid, signal) -> the daemons' lines
        self.dues: dict[int, float | None] = {}  # episode index -> when its SIGKILLs are due
        for instance in facts.instances:
            for line in instance.lines:
                if line.kind == "signal_sent" and line.get("result") in ("sent", None):
                    self.sent.setdefault((line.get("pid"), line.get("signal")), []).append(line)

    def run(self) -> Verdict:
        for holder in self.facts.holders:
            self.receipts(holder)
        for holder in self.facts.holders:
            self.owed(holder)
            self.kills(holder)
            self.verdict.counts["jobs_after_clear_signalled"] += self.signalled_after_clear(holder)
        self.episodes()
        self.daemons()
        self.verdict.violations.sort(key=lambda v: v.at)
        return self.verdict

    def flag(self, at: float, text: str) -> None:
        self.verdict.violations.append(Violation(at, f"t+{at - self.facts.t0:.2f} s: {text}"))

    # -- joins -----------------------------------------------------------------------------------------

    def episode_at(self, at: float) -> Episode | None:
        return next((e for e in reversed(self.facts.episodes) if e.started <= at), None)

    def instance_at(self, at: float) -> Instance | None:
        up = [i for i in self.facts.instances if i.started <= at and (i.ended is None or at < i.ended)]
        return up[-1] if up else None

    def logged(self, holder: HolderFacts, signame: str, at: float) -> LogLine | None:
        """The daemon's line for this signal to this process, nearest in time, not joined yet."""
        best: LogLine | None = None
        for line in self.sent.get((holder.pid, signame), []):
            start = line.get("start_time")
            if holder.start_time is not None and start is not None and int(str(start)) != holder.start_time:
                continue
            if id(line) in self.used or abs(line.at - at) > MATCH + line.resolution:
                continue
            if best is None or abs(line.at - at) < abs(best.at - at):
                best = line
        if best is not None:
            self.used.add(id(best))
        return best

    def crash_near(self, at: float) -> bool:
        """A kill -9 just after `at`: it may have sent the signal and died before logging it."""
        return any(i.told == "kill" and i.ended is not None and at - 1.0 <= i.ended <= at + 2.0
                   for i in self.facts.instances)  # fmt: skip

    def sender(self, line: LogLine | None, at: float) -> Instance | None:
        return self.facts.instances[line.instance - 1] if line is not None else self.instance_at(at)

    def attribute(
        self, what: str, at: float, sender: Instance | None, kept: HolderFacts | None = None
    ) -> Episode | None:
        """The event a signal received at `at` is for; None (flagged) if none: it came more than
        CLEAR_SLACK after the last clear, or, however soon, from a daemon started after that clear (which
        must have waited for a fresh metadata answer). `kept`: a SIGKILL's holder; one that got its SIGTERM
        from an earlier daemon keeps its deadline and its SIGKILL across the restart, heard or not."""
        episode = self.episode_at(at)
        cleared = episode.cleared if episode is not None else None
        if (
            episode is not None
            and cleared is not None
            and at > cleared
            and sender
            and sender.started > cleared
        ):
            if self.kept_kill(kept, episode, sender, at):
                self.verdict.counts["kept_kills_after_restart"] += 1
                return episode  # by the rule: a deadline kept across the restart, heard or not
            self.flag(at, f"{what} for the {self.describe(episode)}, which cleared while no daemon ran, by "
                      f"daemon #{sender.index} started {sender.started - cleared:.1f} s after the clear: it "
                      "signalled without a fresh metadata answer")  # fmt: skip
            self.verdict.counts["signals_after_clear_while_down"] += 1
            return None
        if episode is None or (
            cleared is not None and at > cleared + CLEAR_SLACK and not self.unheard(sender, at)
        ):
            self.flag(at, f"{what} outside any event")
            return None
        return episode

    def kept_kill(self, holder: HolderFacts | None, episode: Episode, sender: Instance, at: float) -> bool:
        """A SIGKILL, at or past the deadline, of a holder an earlier daemon SIGTERMed in this event."""
        if holder is None or episode.deadline is None or at < episode.deadline - KILL_TOLERANCE:
            return False
        return any(t < sender.started for t in self.terms.get((holder.serial, episode.index), []))

    def unheard(self, sender: Instance | None, at: float) -> bool:
        """The sender's log shows it still knew of the event when it sent (at most 1 s before `at`): it had
        not heard of the clear yet (faults can hide it for long), so the signal is no daemon bug."""
        if sender is None:
            return False
        return any(s <= at and e >= at - 1.0 for s, e in beliefs(sender, self.facts.end, HEARD))

    # -- SIGTERM ---------------------------------------------------------------------------------------

    def receipts(self, holder: HolderFacts) -> None:
        name = _name(holder)
        for at in holder.terms:
            self.verdict.counts["sigterms"] += 1
            line = self.logged(holder, "SIGTERM", at)
            sender = self.sender(line, at)
            if line is None and not self.crash_near(at):
                self.flag(at, f"{name} received a SIGTERM no daemon's log names (a signal from elsewhere?)")
            if holder.opened is not None and at < holder.opened:
                self.flag(at, f"{name} received a SIGTERM before it opened the device")
            episode = self.attribute(f"SIGTERM to {name}", at, sender)
            if episode is None:
                continue
            if holder.released is not None and holder.released < episode.started:
                self.flag(
                    at,
                    f"SIGTERM to {name}, which had released the device before the {self.describe(episode)}",
                )
            got = self.terms.setdefault((holder.serial, episode.index), [])
            got.append(at)
            if len(got) == 2:
                self.flag(at, f"second SIGTERM to {name} in the {self.describe(episode)} (first at "
                              f"t+{got[0] - self.facts.t0:.2f} s)")  # fmt: skip

    def owed(self, holder: HolderFacts) -> None:
        """A holder that held the device while an event was on and a daemon knew it got its SIGTERM."""
        if holder.opened is None:
            return
        until = holder.stopped_holding or self.facts.end
        for episode in self.facts.episodes:
            span = (max(holder.opened, episode.started), min(until, episode.cleared or self.facts.end))
            if span[0] >= span[1]:
                continue
            first = self.drain_began(episode)
            late = first is not None and holder.opened > first
            got = bool(self.terms.get((holder.serial, episode.index)))
            self.verdict.counts["late_arrivals"] += late
            self.verdict.counts["late_arrivals_signalled"] += late and (got or self.named(holder, span))
            known = [(max(span[0], s), min(span[1], e), i) for s, e, i in self.beliefs]
            longest = max(known, key=lambda k: k[1] - k[0], default=None)
            if got or longest is None or longest[1] - longest[0] < REACT:
                continue
            if self.facts.intents.get((holder.pid, holder.start_time or 0)) is False:
                self.verdict.counts["possibly_sent"] += 1  # a crash left its SIGTERM an unconfirmed intent
                continue
            note = ""
            if late and first is not None:
                note = f" (a late arrival: it opened {holder.opened - first:.1f} s after the drain began)"
            held = longest[1] - longest[0]
            what = f"the {self.describe(episode)} was on and daemon #{longest[2]} knew it"
            text = f"{_name(holder)} held the device for {held:.1f} s while {what}, and got no SIGTERM{note}"
            self.flag(longest[0] + REACT, text)

    def named(self, holder: HolderFacts, span: tuple[float, float]) -> bool:
        """A daemon's log names a SIGTERM to this process in `span` (give or take CLEAR_SLACK): one it sent,
        received or not (SIGTERM and SIGKILL in one wave: the holder is dead before its handler runs)."""
        lines = self.sent.get((holder.pid, "SIGTERM"), [])
        return any(
            span[0] - 1.0 <= line.at <= span[1] + CLEAR_SLACK
            and (holder.start_time is None or str(line.get("start_time")) == str(holder.start_time))
            for line in lines
        )

    def signalled_after_clear(self, holder: HolderFacts) -> bool:
        """A clear-while-down's new job got a signal before the next event: it should have got none."""
        if not holder.after_clear or holder.opened is None:
            return False
        later = [e.started for e in self.facts.episodes if e.started > holder.opened]
        until = min(later, default=float("inf"))
        killed = holder.exit_code == -signal.SIGKILL and not holder.culled
        return any(t < until for t in holder.terms) or (killed and (holder.died or 0.0) < until)

    def drain_began(self, episode: Episode) -> float | None:
        """When the event's drain surely began: its first SIGTERM received, or a daemon's "drain started"
        (at the end of its second, for the text format); a holder opening later is a late arrival."""
        times = [t for (_, index), ts in self.terms.items() if index == episode.index for t in ts]
        until = episode.cleared or self.facts.end
        began = [
            x.at + x.resolution for i in self.facts.instances for x in i.lines if x.kind == "drain_started"
        ]
        times += [t for t in began if episode.started <= t <= until]
        return min(times, default=None)

    # -- SIGKILL ---------------------------------------------------------------------------------------

    def kills(self, holder: HolderFacts) -> None:
        died = holder.died if holder.exit_code == -signal.SIGKILL and not holder.culled else None
        if died is not None:
            self.kill(holder, died)
        for episode in self.facts.episodes:
            deadline, due = episode.deadline, self.kill_due(episode)
            if deadline is None or due is None or holder.opened is None or holder.opened > deadline - REACT:
                continue  # a holder that came just before the deadline, or after, is not timed
            if episode.cleared is not None and episode.cleared <= due + KILL_TOLERANCE:
                continue  # cleared by then: the drain is cancelled, nothing is SIGKILLed
            if held_back(self.instance_at(due), due, self.terms.get((holder.serial, episode.index), [])):
                continue  # new to a restarted daemon, the event unconfirmed: past the deadline, nobody new
            if died is not None and self.episode_at(died) is episode:
                continue  # SIGKILLed in this event: its timing is judged by `kill`
            until = holder.stopped_holding or self.facts.end
            if until > due + KILL_TOLERANCE and self.facts.end > due + KILL_TOLERANCE:
                what = f"the {self.describe(episode)}"
                self.flag(due + KILL_TOLERANCE, f"{_name(holder)} still held the device {KILL_TOLERANCE:.0f} "
                          f"s after its SIGKILL was due ({what}) and was not SIGKILLed")  # fmt: skip

    def kill(self, holder: HolderFacts, died: float) -> None:
        self.verdict.counts["sigkills"] += 1
        name = _name(holder)
        line = self.logged(holder, "SIGKILL", died)
        sender = self.sender(line, died)
        if line is None and not self.crash_near(died):
            self.flag(died, f"{name} was SIGKILLed, and no daemon's log names it (a signal from elsewhere?)")
        episode = self.attribute(f"SIGKILL of {name}", died, sender, kept=holder)
        if episode is None:
            return
        self.verdict.counts["killed_without_sigterm"] += not self.terms.get((holder.serial, episode.index))
        deadline, due = episode.deadline, self.kill_due(episode)
        if due is None and sender is not None and self.kept_kill(holder, episode, sender, died):
            return  # kept across a restart after a clear no daemon heard: no daemon knew of it in time
        if deadline is None or due is None:
            self.flag(died, f"SIGKILL of {name} in the {self.describe(episode)}, with no deadline known")
            return
        if holder.opened is not None and holder.opened > deadline - REACT:
            self.verdict.counts["late_kills_untimed"] += 1
            return
        if (
            sender is not None
            and restored(sender, sender.started)
            and not self.kept_kill(holder, episode, sender, died)
        ):
            due = max(due, confirmed(sender))  # new to a restarted daemon: held until an answer confirms it
        logged = line.at + line.resolution if line is not None else died
        if sender is not None and sender.told and abs(min(died, logged) - deadline) <= KILL_TOLERANCE:
            due = deadline  # told to stop just before its deadline, it got there first: on time
        offset = min(died, logged) - due
        self.verdict.kill_offsets.append(round(offset, 3))
        if abs(offset) > KILL_TOLERANCE + (line.resolution if line is not None else 0.0):
            who = f"the daemon logged it at {logged - due:+.2f} s" if line is not None else "no log line"
            t0 = self.facts.t0
            self.flag(died, f"SIGKILL of {name} at {offset:+.2f} s from its due time t+{due - t0:.2f} "
                      f"(reaped at {died - due:+.2f} s, {who}; deadline t+{deadline - t0:.2f})")  # fmt: skip

    def kill_due(self, episode: Episode) -> float | None:
        """The deadline if a daemon knew of the event then; else the first moment one did afterwards."""
        if episode.index not in self.dues:
            self.dues[episode.index] = self._kill_due(episode)
        return self.dues[episode.index]

    def _kill_due(self, episode: Episode) -> float | None:
        deadline = episode.deadline
        if deadline is None:
            return None
        for instance in self.facts.instances:
            # A daemon told to stop interrupts its drain for the next start (the state file keeps it):
            # from the order on, it kills nothing, so it knows nothing here.
            until = self.told_at(instance)
            if until is not None and until <= deadline:
                continue
            knows = [
                max(s, deadline)
                for s, e in beliefs(instance, self.facts.end, early=True)
                if min(e, until if until is not None else e) > deadline
            ]
            if not knows:
                continue
            moment = min(knows)
            if moment <= deadline:
                return deadline
            if episode.cleared is not None and moment > episode.cleared:
                return None
            if until is None or until >= moment + KILL_TOLERANCE:
                return moment
        return None

    def told_at(self, instance: Instance) -> float | None:
        """When the driver told this daemon to stop (or killed it); when it ended, if not told."""
        if instance.told is None:
            return instance.ended
        said = (f"SIGTERM to daemon #{instance.index}", f"kill -9 to daemon #{instance.index}")
        told = [t for t, action in self.facts.actions if action in said]
        return min(told) if told else instance.ended

    def episodes(self) -> None:
        for episode in self.facts.episodes:
            self.verdict.counts["clears_while_down"] += episode.cleared_while_down
            first = episode.deadline
            for seen, deadline in episode.deadlines[1:]:
                if first is not None and deadline > first + 1e-6:
                    self.flag(seen, f"the deadline of the {self.describe(episode)} moved later: "
                                    f"{first:.3f} -> {deadline:.3f}")  # fmt: skip
            if episode.drained_at_clear is False and episode.cleared is not None:
                if self.kill_due(episode) is None:
                    continue  # no daemon knew of it from its deadline to its clear (down, or starting up)
                self.flag(episode.cleared, f"the {self.describe(episode)} outlived its deadline undrained")

    def daemons(self) -> None:
        for instance in self.facts.instances:
            if instance.ended is not None and instance.told is None:
                self.flag(
                    instance.ended, f"daemon #{instance.index} exited by itself with {instance.exit_code}"
                )
            if instance.told in ("stop", "final") and instance.ended is not None and instance.exit_code != 0:
                if instance.exit_code == -signal.SIGTERM and not instance.lines:
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

    def describe(self, episode: Episode) -> str:
        return f"{episode.source} event #{episode.index} of t+{episode.started - self.facts.t0:.1f} s"


def _name(holder: HolderFacts) -> str:
    return f"pid {holder.pid} (holder #{holder.serial}, {holder.mode})"
