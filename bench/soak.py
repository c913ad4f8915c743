"""The soak: a real daemon under random events, metadata faults, holders coming and going, kill -9 / graceful
restarts, late arrivals and clears-while-down, judged from ground truth. `python -m bench.soak --seconds 60
--seed 1 [--load]`.

Isolated: the driver re-executes itself as init of a private PID namespace (`unshare`), so the daemon's
real, unnarrowed scanner sees only this run's processes, and its holders hold a device node whose numbers
nothing else on the machine holds (tests/support/workloads.py `UniqueDevice`), so no other daemon's
scanner finds them.
Ground truth (bench/soak_facts.py): each holder logs every SIGTERM it receives, timed by itself; deaths are
timed by a reaper thread; each daemon run logs every signal, event and drain (JSON lines when it has
`--log-format json`); the driver logs what it set on the fake and when. bench/soak_checker.py joins them
at the end, and each violation comes with the timeline around it.

Episodes, drawn at random: events (preemption or maintenance), cleared at their deadline + 2 s or early;
faults of every kind; holders that exit on SIGTERM, ignore it, or release the device; kill -9 and graceful
restarts; late arrivals (during an event, after its first holders have gone, a job supervisor's restarted
job opens the device); clears-while-down (kill -9 mid-drain, the event cleared while the daemon is down, a
new job started, the daemon restarted: the new job must get no signal). Crashes happen in the first half;
the second half keeps one daemon, whose RSS and open fds at idle moments must stay flat. `--load` runs a
busy process per core for the whole run, so races that show only under load show.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from bench.soak_checker import REACT, check
from bench.soak_facts import Episode, Result, facts_json, load_facts, parse_daemon_log, timeline
from bench.soak_procs import BUSY
from bench.soak_world import World

CLEAR_GAP = 6.0  # s between a clear and the next event: the daemon hears of the clear first
MAX_HOLDERS = 8


class Soak(World):
    """The random mix of episodes over a `World`, then the verdict."""

    def run(self) -> Result:
        cpu = _cpu_times()
        for i in range(os.cpu_count() or 1) if self.result.load else ():
            self.busy.append(self.reaper.spawn(("busy", i), [sys.executable, "-c", BUSY]))
        self.start_daemon()
        t0 = self.facts.t0
        self.cwd_from = (
            t0 + self.seconds * 0.3
        )  # the first clear-while-down: late arrivals have a chance first
        end, next_action, next_sample = t0 + self.seconds, t0 + 2.0, t0
        # At least one kill -9 and one graceful restart, whatever the dice say (both in the first half).
        forced = [(t0 + self.seconds * 0.2, False), (t0 + self.seconds * 0.35, True)]
        while time.time() < end:
            now = time.time()
            second_half = now - t0 > self.seconds / 2
            self.observe()
            if now >= next_sample:
                self.sample(second_half)
                next_sample = now + 1.0
            if forced and now >= forced[0][0] and self.ready():
                self.restart(graceful=forced.pop(0)[1])
            if now >= next_action:
                self.act(now, second_half)
                next_action = now + self.rng.uniform(0.3, 1.5)
            time.sleep(0.05)  # the driver's polling period; every fact is timed at its source, not here
        self.finish()
        busy, total = (b - a for a, b in zip(cpu, _cpu_times(), strict=True))
        self.result.cpu_busy_percent = round(100 * busy / max(total, 1), 1)
        return self.judge()

    def act(self, now: float, second_half: bool) -> None:
        episode = self.current()
        roll = self.rng.random()
        if episode is not None and self.episode_step(episode, now, second_half, roll):
            return
        eager = self.result.events < 2 or (not second_half and not self.result.clears_while_down)
        if episode is None and roll < (0.5 if eager else 0.25) and self.gap_over(now):
            self.start_event()
        elif roll < 0.55 and len(self.holding()) < MAX_HOLDERS:
            self.spawn()
        elif roll < 0.75:
            self.inject_fault()
        elif roll < 0.9 and not second_half and self.may_restart(episode):
            self.restart(graceful=roll >= 0.85)
        elif roll < 0.95:
            self.cull()

    def episode_step(self, episode: Episode, now: float, second_half: bool, roll: float) -> bool:
        """What may happen to the current event: its clear, a clear-while-down, a late arrival, an early
        clear. False if none did."""
        if episode.deadline is not None and now > self.clear_due(episode):
            self.clear_event(episode)
        elif self.mid_drain(episode, now, second_half) and (roll < 0.15 or self.cwd_owed(now)):
            self.clear_while_down(episode)
        elif self.first_holders_gone(episode) and (not self.result.late_arrivals or roll < 0.6):
            self.late[episode.index] = now
            self.result.late_arrivals += 1
            self.spawn(self.rng.choice(["handled", "report", "release"]), late=True)
        elif roll < 0.08 and (episode.deadline is None or now < episode.deadline):
            self.clear_event(episode)  # cleared early: the drain is cancelled
        else:
            return False
        return True

    def may_restart(self, episode: Episode | None) -> bool:
        """Mostly once READY (a start takes seconds under load); not while a late arrival is to be seen."""
        if episode is not None and episode.index in self.late:
            return False
        return self.ready() or self.rng.random() < 0.2

    def gap_over(self, now: float) -> bool:
        """CLEAR_GAP since the last clear, and the state file lists no event: the daemon has heard that
        clear. Otherwise the next event is one nobody could tell from the last (faults or restarts hid the
        value going back, so to the daemon it never did, and the old event, its deadline and its drain go
        on). After a clear while down, also the restarted daemon READY (the episode is about what it does
        on its own start)."""
        last = self.facts.episodes[-1] if self.facts.episodes else None
        if last is None:
            return True
        heard = not (self.read_state() or {"events": [None]}).get("events")
        return (
            now > (last.cleared or 0) + CLEAR_GAP and heard and (not last.cleared_while_down or self.ready())
        )

    def cwd_owed(self, now: float) -> bool:
        """The first clear-while-down is forced, once a late arrival had its chance (or 30% of the run)."""
        return not self.result.clears_while_down and (self.result.late_arrivals > 0 or now > self.cwd_from)

    def clear_due(self, episode: Episode) -> float:
        """Deadline + 2 s, or later when a late arrival needs the time to be seen holding."""
        assert episode.deadline is not None
        return max(episode.deadline + 2.0, self.late.get(episode.index, 0.0) + REACT + 1.5)

    def first_terms(self, episode: Episode) -> float | None:
        return min((t for h in self.facts.holders for t in h.terms if t >= episode.started), default=None)

    def first_holders_gone(self, episode: Episode) -> bool:
        """The drain began (a first SIGTERM, or its deadline on file), and every holder that held the device
        by then is gone."""
        on_file = episode.deadlines[0][0] if episode.deadlines else None
        began = [t for t in (self.first_terms(episode), on_file) if t is not None]
        if not began or episode.index in self.late:
            return False
        return not [h for h in self.holding() if h.opened is not None and h.opened <= min(began)]

    def mid_drain(self, episode: Episode, now: float, second_half: bool) -> bool:
        return (not second_half and episode.deadline is not None and now < episode.deadline - 0.5
                and self.first_terms(episode) is not None and self.daemon_gone() is None)  # fmt: skip

    def clear_while_down(self, episode: Episode) -> None:
        """kill -9 mid-drain, clear the event while it is down, start a new job, restart: the daemon must
        wait for a fresh metadata answer, so the new job gets no signal."""
        self.result.clears_while_down += 1
        self.result.crashes += 1
        self.end_daemon("kill")
        self.clear_event(episode, while_down=True)
        self.wait_opened(self.spawn("report", after_clear=True))
        self.start_daemon()

    def cull(self) -> None:
        """Released holders keep running after their SIGTERM: end one now and then (outside any event)."""
        if self.current() is not None:
            return
        for holder in self.facts.holders:
            if holder.died is None and holder.released is not None:
                self.kill_holder(holder)
                self.say(f"culled holder #{holder.serial}")
                return

    def finish(self) -> None:
        episode = self.current()
        if episode is not None:
            self.clear_event(episode)
        self.fake.faults.clear()
        limit = time.monotonic() + 30
        while time.monotonic() < limit:
            self.facts.final_state = self.read_state()
            if (
                self.facts.final_state
                and not self.facts.final_state.get("events")
                and not self.facts.final_state.get("drain")
            ):
                break
            time.sleep(0.1)  # polling the state file for a condition, with a deadline
        else:
            self.facts.final_clean = False
        self.facts.leftovers = [p.name for p in self.state.iterdir() if p.name.endswith(".tmp")]
        if self.daemon is not None and self.daemon_gone() is None:
            self.end_daemon("final")
        self.observe()
        self.facts.end = time.time()
        for holder in self.facts.holders:
            if holder.died is None:
                self.kill_holder(holder)
        for i in range(len(self.busy)):
            self.reaper.kill(("busy", i), signal.SIGKILL)
        self.reaper.stop()
        self.notify.close()
        self.collect_served()
        self.fake.stop()
        self.device.close()
        self.read_holder_log()
        for instance in self.facts.instances:
            readies = self.notify.ready.get(instance.pid, [])
            instance.ready = min((t for t in readies if t >= instance.started), default=None)
            instance.lines = parse_daemon_log(instance.log_path.read_text(errors="replace"), instance.index)

    def judge(self) -> Result:
        verdict = check(self.facts)
        counts, result = verdict.counts, self.result
        result.sigterms, result.sigkills_seen = counts["sigterms"], counts["sigkills"]
        result.killed_without_sigterm, result.restart_kills = (
            counts["killed_without_sigterm"],
            counts["restart_kills"],
        )
        result.late_arrivals_seen = counts["late_arrivals"]
        result.late_arrivals_signalled = counts["late_arrivals_signalled"]
        result.jobs_after_clear_signalled = counts["jobs_after_clear_signalled"]
        result.possibly_sent = counts["possibly_sent"]
        result.kill_offsets_s = verdict.kill_offsets
        result.term_latencies_s, result.late_term_latencies_s = (
            verdict.term_latencies,
            verdict.late_term_latencies,
        )
        result.violations = [v.text for v in verdict.violations]
        result.timelines = ["\n".join([v.text, *timeline(self.facts, v.at)]) for v in verdict.violations[:20]]
        return result


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all cores, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(values) - values[3] - values[4], sum(values)


def recheck(evidence: Path) -> int:
    """The checker again over a run's facts.json: each violation with its timeline."""
    facts = load_facts((evidence / "facts.json").read_text())
    verdict = check(facts)
    for v in verdict.violations:
        sys.stdout.write("\n".join([f"VIOLATION {v.text}", *timeline(facts, v.at)]) + "\n\n")
    sys.stdout.write(f"{len(verdict.violations)} violation(s); {dict(verdict.counts)}\n")
    return 1 if verdict.violations else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_S", "600")))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--load", action="store_true", help="keep every core busy for the whole run")
    parser.add_argument("--out", help="write the result as JSON here (default: stdout)")
    keep = "keep the logs and facts here (default: a new directory, kept only when something was violated)"
    parser.add_argument("--evidence", help=keep)
    parser.add_argument("--recheck", metavar="EVIDENCE", help="judge a run's kept facts again, and exit")
    args = parser.parse_args(argv)
    if args.recheck:
        return recheck(Path(args.recheck))
    if os.getpid() != 1:  # not yet in a PID namespace of our own: re-execute inside one
        unshare = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
        given = sys.argv[1:] if argv is None else argv
        os.execvp(unshare[0], [*unshare, sys.executable, "-m", "bench.soak", *given])  # noqa: S606 - no shell
    work = Path(tempfile.mkdtemp(prefix="tpu-watchdog-soak-"))
    try:
        soak = Soak(args.seconds, args.seed, work, args.load)
        result = soak.run()
        if result.violations or args.evidence:
            keep = Path(args.evidence or tempfile.mkdtemp(prefix="tpu-watchdog-soak-evidence-"))
            keep.mkdir(parents=True, exist_ok=True)
            for path in [*work.glob("*.log"), work / "config.toml"]:
                shutil.copy(path, keep)
            (keep / "facts.json").write_text(facts_json(soak.facts))
            result.evidence = str(keep)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for text in result.timelines:
        sys.stderr.write(f"VIOLATION {text}\n\n")
    text = json.dumps(asdict(result))
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text + "\n")
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main())
