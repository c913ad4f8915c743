"""The soak (bench/soak.py): SOAK_S seconds (default 600) per run; the runs in SOAK_LOAD_SEEDS (default
"7") go at once, each under load (a busy process per core), then those in SOAK_QUIET_SEEDS (default none)
one after another without it. Their table, a column per run, goes in docs/reliability.md; a summary here.
SOAK_EVIDENCE=DIR keeps every run's logs and facts in DIR/seed-N (`python -m bench.soak --recheck` judges
them again); without it they are kept only for a run with a report. A 60-second quiet run is part of
`make test` (tests/system/test_soak.py).

The 30-minute verdict on a release: `SOAK_S=1800 SOAK_LOAD_SEEDS=101,102,103 SOAK_QUIET_SEEDS=104
.venv/bin/python -m bench soak` (about an hour: three loaded runs sharing the cores, then a quiet one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.soak_checker import KILL_TOLERANCE, RESCAN, TERM_BOUND, percentiles

DOC = Path(__file__).resolve().parent.parent / "docs" / "reliability.md"


def _command(seconds: float, seed: int, load: bool, out: str) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "bench.soak",
        "--seconds",
        str(seconds),
        "--seed",
        str(seed),
        "--out",
        out,
    ]
    evidence = os.environ.get("SOAK_EVIDENCE")
    if evidence:
        command += ["--evidence", str(Path(evidence) / f"seed-{seed}")]
    return command + (["--load"] if load else [])


def _read(out: str) -> dict[str, Any]:
    text = Path(out).read_text()
    if not text:
        raise RuntimeError("the soak wrote no result (its stderr says why)")
    result: dict[str, Any] = json.loads(text)
    if result["evidence"]:  # (the soak printed each report with its timeline)
        sys.stderr.write(f"seed {result['seed']}: logs and facts kept in {result['evidence']}\n")
    return result


def soak(seconds: float, seed: int, load: bool = False) -> dict[str, Any]:
    """One soak in its own PID namespace (`load`: a busy process per core); its result, violations and the
    timelines around them included."""
    return soaks(seconds, [seed] if load else [], [] if load else [seed])[0]


def soaks(seconds: float, loaded: list[int], quiet: list[int]) -> list[dict[str, Any]]:
    """The `loaded` runs at once (each with --load), then the `quiet` ones one after another."""
    with tempfile.TemporaryDirectory() as work:
        outs = {seed: str(Path(work) / f"soak-{seed}.json") for seed in [*loaded, *quiet]}
        running = [subprocess.Popen(_command(seconds, seed, True, outs[seed])) for seed in loaded]
        for process in running:
            process.wait(timeout=seconds + 300)
        for seed in quiet:
            subprocess.run(_command(seconds, seed, False, outs[seed]), check=False, timeout=seconds + 300)
        return [_read(outs[seed]) for seed in [*loaded, *quiet]]


def _first_last_max(values: list[int], unit: float, fmt: str) -> str:
    if not values:
        return "no sample"
    first, last, top = (v / unit for v in (values[0], values[-1], max(values)))
    return f"{first:{fmt}} -> {last:{fmt}}, max {top:{fmt}}"


def _latency(values: list[float]) -> str:
    found = percentiles(values)
    if found is None:
        return "none"
    return f"{found[0] * 1000:.0f} / {found[1] * 1000:.0f} / {found[2] * 1000:.0f} ms (n = {len(values)})"


def _column(result: dict[str, Any], together: int) -> list[str]:
    """One run's figures, every one from ground truth (bench/soak_checker.py says how each is judged)."""
    kills = [abs(v) for v in result["kill_offsets_s"]]
    violations = result["violations"]
    busy = f"CPU {result['cpu_busy_percent']:.0f} % busy"
    late_max = max(result["late_term_latencies_s"], default=None)
    at_once = f", {together} at once" if together > 1 else ""
    return [
        f"{result['seconds']:.0f} s, seed {result['seed']}",
        f"a busy process per core{at_once} ({busy})" if result["load"] else f"none ({busy})",
        f"{len(violations)}: " + "; ".join(violations[:3]) if violations else "0",
        str(result["events"]),
        str(result["sigterms"]),
        _latency(result["term_latencies_s"]),
        f"{late_max:.2f} s" if late_max is not None else "none",
        f"{result['sigkills_seen']} / {result['killed_without_sigterm']}",
        f"{max(kills):.2f} s (n = {len(kills)})" if kills else "none",
        str(result["restart_kills"]),
        str(result["faults"]),
        f"{result['crashes']} / {result['graceful_restarts']}",
        str(result["holders"]),
        f"{result['late_arrivals']} / {result['late_arrivals_seen']} / {result['late_arrivals_signalled']}",
        f"{result['clears_while_down']} / {result['jobs_after_clear_signalled']}",
        str(result["possibly_sent"]),
        f"{result['peak_rss_kib'] / 1024:.1f} MiB",
        _first_last_max(result["rss_kib"], 1024, ".1f"),
        _first_last_max(result["fds"], 1, ".0f"),
    ]


ROWS = (
    "duration, seed",
    "load",
    "reports (invariant violations)",
    "events (preemption or maintenance)",
    "SIGTERMs received by holders",
    f"SIGTERM latency from the event as served, p50 / p99 / max (bound {TERM_BOUND:.1f} s)",
    f"late arrivals: SIGTERM after their open, max (bound {RESCAN + TERM_BOUND:.1f} s)",
    "SIGKILLs observed / of them with no SIGTERM first",
    f"largest SIGKILL offset from its deadline, event as served + grace (bound {KILL_TOLERANCE:.0f} s)",
    "SIGKILLs due while the daemon was down, sent as the next one resumed",
    "metadata faults injected",
    "kill -9 of the daemon / graceful restarts",
    "holder processes started",
    "late arrivals: episodes / seen by the checker / signalled",
    "clears while down / new jobs signalled after them",
    "SIGTERMs excused (their daemon ended while they were owed)",
    "daemon peak RSS",
    "idle RSS in the second half, MiB (first -> last)",
    "idle open fds in the second half (first -> last)",
)


def table(results: list[dict[str, Any]]) -> str:
    """A row per figure, a column per run."""
    together = sum(r["load"] for r in results)
    columns = [_column(r, together if r["load"] else 1) for r in results]
    head = "| | " + " | ".join(f"seed {r['seed']}" for r in results) + " |"
    rule = "| --- |" + " --- |" * len(results)
    rows = [f"| {name} | " + " | ".join(c[i] for c in columns) + " |" for i, name in enumerate(ROWS)]
    return "\n".join([head, rule, *rows])


def _seeds(name: str, default: str) -> list[int]:
    return [int(seed) for seed in os.environ.get(name, default).split(",") if seed.strip()]


def run() -> str:
    from bench.__main__ import replace_section  # the same section markers as docs/benchmarks.md

    seconds = float(os.environ.get("SOAK_S", "600"))
    loaded, quiet = _seeds("SOAK_LOAD_SEEDS", "7"), _seeds("SOAK_QUIET_SEEDS", "")
    results = soaks(seconds, loaded, quiet)
    command = (f"SOAK_S={seconds:.0f} SOAK_LOAD_SEEDS={','.join(map(str, loaded))} "
               f"SOAK_QUIET_SEEDS={','.join(map(str, quiet))} .venv/bin/python -m bench soak")  # fmt: skip
    section = f"### Soak\n\n`{command}`:\n\n{table(results)}\n"
    if DOC.exists():
        DOC.write_text(replace_section(DOC.read_text(), "soak", section))
    reports = sum(len(r["violations"]) for r in results)
    return (
        f"## Soak\n\n{len(results)} run(s) of {seconds:.0f} s of random events, faults, holders, daemon "
        f"restarts, late arrivals and clears while down, judged from ground truth: "
        f"{reports} report(s). The table is in docs/reliability.md.\n"
    )
