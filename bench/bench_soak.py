"""The soak (bench/soak.py) for SOAK_S seconds (default 600): its figures here, its table in
docs/reliability.md. A 60-second run of the same driver is part of `make test` (tests/system/test_soak.py)."""

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


def soak(seconds: float, seed: int) -> dict[str, Any]:
    """One soak in its own PID namespace; its result (violations included)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sys.executable, "-m", "bench.soak", "--seconds", str(seconds), "--seed", str(seed)]
        subprocess.run([*command, "--out", out.name], check=False, timeout=seconds + 300)
        text = Path(out.name).read_text()
    if not text:
        raise RuntimeError("the soak wrote no result; see /tmp/tpu-watchdog-soak-daemon.log")
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
    rows = [
        ("duration, seed", f"{result['seconds']:.0f} s, seed {result['seed']}"),
        ("events (preemption or maintenance)", result["events"]),
        ("SIGTERMs received by holders", result["sigterms"]),
        ("SIGKILLs observed (deadline reached)", result["sigkills_seen"]),
        ("largest SIGKILL distance from its due time", f"{max(kills):.2f} s" if kills else "none"),
        ("metadata faults injected", result["faults"]),
        ("kill -9 of the daemon / graceful restarts", f"{result['crashes']} / {result['graceful_restarts']}"),
        ("holder processes started", result["holders"]),
        ("daemon peak RSS", f"{result['peak_rss_kib'] / 1024:.1f} MiB"),
        ("idle RSS in the second half, MiB (first -> last)", _first_last_max(result["rss_kib"], 1024, ".1f")),
        ("idle open fds in the second half (first -> last)", _first_last_max(result["fds"], 1, ".0f")),
        ("invariant violations", "; ".join(violations) if violations else "0"),
    ]
    return "| | |\n| --- | --- |\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)


def run() -> str:
    from bench.__main__ import replace_section  # the same section markers as docs/benchmarks.md

    seconds = float(os.environ.get("SOAK_S", "600"))
    result = soak(seconds, SEED)
    command = f"SOAK_S={seconds:.0f} .venv/bin/python -m bench soak"
    section = f"### Soak\n\n`{command}`:\n\n{table(result)}\n"
    if DOC.exists():
        DOC.write_text(replace_section(DOC.read_text(), "soak", section))
    verdict = f"{len(result['violations'])} invariant violations" if result["violations"] else "none violated"
    return (
        f"## Soak\n\n{seconds:.0f} s of random events, faults, holders and daemon restarts; invariants: "
        f"{verdict}. The table is in docs/reliability.md.\n"
    )
