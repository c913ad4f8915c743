"""The soak (bench/soak.py) for SOAK_S seconds (default 600), under load unless SOAK_LOAD=0: its figures
here, its table in docs/reliability.md. A 60-second run under load is part of `make test`
(tests/system/test_soak.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parent.parent / "docs" / "reliability.md"
SEED = 7


def soak(seconds: float, seed: int, load: bool = False) -> dict[str, Any]:
    """One soak in its own PID namespace (`load`: a busy process per core); its result, violations and the
    timelines around them included."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sys.executable, "-m", "bench.soak", "--seconds", str(seconds), "--seed", str(seed)]
        command += ["--load"] if load else []
        subprocess.run([*command, "--out", out.name], check=False, timeout=seconds + 300)
        text = Path(out.name).read_text()
    if not text:
        raise RuntimeError("the soak wrote no result (its stderr says why)")
    result: dict[str, Any] = json.loads(text)
    return result


def _first_last_max(values: list[int], unit: float, fmt: str) -> str:
    if not values:
        return "no sample"
    first, last, top = (v / unit for v in (values[0], values[-1], max(values)))
    return f"{first:{fmt}} -> {last:{fmt}}, max {top:{fmt}}"


def table(result: dict[str, Any]) -> str:
    kills = [abs(v) for v in result["kill_offsets_s"]]
    violations = result["violations"]
    busy = f"CPU {result['cpu_busy_percent']:.0f} % busy"
    after = result["jobs_after_clear_signalled"]
    killed, bare = result["sigkills_seen"], result["killed_without_sigterm"]
    late, seen, signalled = (
        result[k] for k in ("late_arrivals", "late_arrivals_seen", "late_arrivals_signalled")
    )
    rows = [
        ("duration, seed", f"{result['seconds']:.0f} s, seed {result['seed']}"),
        ("load", f"a busy process per core ({busy})" if result["load"] else f"none ({busy})"),
        ("events (preemption or maintenance)", result["events"]),
        ("SIGTERMs received by holders", result["sigterms"]),
        ("SIGKILLs observed (deadline reached) / of them with no SIGTERM first", f"{killed} / {bare}"),
        ("largest SIGKILL distance from its due time", f"{max(kills):.2f} s" if kills else "none"),
        ("metadata faults injected", result["faults"]),
        ("kill -9 of the daemon / graceful restarts", f"{result['crashes']} / {result['graceful_restarts']}"),
        ("holder processes started", result["holders"]),
        ("late arrivals: episodes / seen by the checker / signalled", f"{late} / {seen} / {signalled}"),
        ("clears while down / new jobs signalled after them", f"{result['clears_while_down']} / {after}"),
        ("SIGTERMs excused (a crash left them unconfirmed intents)", result["possibly_sent"]),
        ("daemon log read as", result["log_format"]),
        ("daemon peak RSS", f"{result['peak_rss_kib'] / 1024:.1f} MiB"),
        ("idle RSS in the second half, MiB (first -> last)", _first_last_max(result["rss_kib"], 1024, ".1f")),
        ("idle open fds in the second half (first -> last)", _first_last_max(result["fds"], 1, ".0f")),
        ("invariant violations", f"{len(violations)}: " + "; ".join(violations[:3]) if violations else "0"),
    ]
    return "| | |\n| --- | --- |\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)


def run() -> str:
    from bench.__main__ import replace_section  # the same section markers as docs/benchmarks.md

    seconds = float(os.environ.get("SOAK_S", "600"))
    load = os.environ.get("SOAK_LOAD", "1") != "0"
    result = soak(seconds, SEED, load)
    command = f"SOAK_S={seconds:.0f} SOAK_LOAD={int(load)} .venv/bin/python -m bench soak"
    section = f"### Soak\n\n`{command}`:\n\n{table(result)}\n"
    if DOC.exists():
        DOC.write_text(replace_section(DOC.read_text(), "soak", section))
    verdict = f"{len(result['violations'])} invariant violations" if result["violations"] else "none violated"
    return (
        f"## Soak\n\n{seconds:.0f} s of random events, faults, holders, daemon restarts, late arrivals and "
        f"clears while down{' under load' if load else ''}; invariants: "
        f"{verdict}. The table is in docs/reliability.md.\n"
    )
