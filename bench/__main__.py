"""`python -m bench [NAME ...]` runs benchmarks (default: all) and rewrites their docs/benchmarks.md sections.

Each `bench/bench_<name>.py` has `run() -> str` returning a Markdown section (its figures, the goal, and
whether it was met). A section lives between `<!-- bench:NAME -->` markers, so running one benchmark
replaces only its own section and keeps the others' last figures.
"""

from __future__ import annotations

import datetime
import importlib
import os
import platform
import re
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
HEADER = """# Benchmarks

Written by `make bench` (or `.venv/bin/python -m bench NAME` for one): each benchmark rewrites its own
section, between its `<!-- bench:NAME -->` markers, with what it measures, the goal, whether the figure met
it, and when and on what machine it was measured. The sections outside the markers say how to measure what
no benchmark measures yet.
"""


def available() -> list[str]:
    here = Path(__file__).resolve().parent
    return sorted(p.stem.removeprefix("bench_") for p in here.glob("bench_*.py"))


def machine() -> str:
    return (
        f"{platform.node() or 'host'}: {os.cpu_count()} CPUs, Linux {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def replace_section(doc: str, name: str, body: str) -> str:
    block = f"<!-- bench:{name} -->\n{body.rstrip()}\n<!-- /bench:{name} -->"
    pattern = re.compile(rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->", re.S)
    if pattern.search(doc):
        return pattern.sub(lambda _: block, doc)
    return doc.rstrip() + "\n\n" + block + "\n"


def main(argv: list[str]) -> int:
    names = argv or available()
    unknown = [n for n in names if n not in available()]
    if unknown:
        sys.stderr.write(f"unknown benchmark(s): {', '.join(unknown)}; available: {', '.join(available())}\n")
        return 2
    doc = DOC.read_text() if DOC.exists() else HEADER
    for name in names:
        sys.stderr.write(f"== bench {name}\n")
        module = importlib.import_module(f"bench.bench_{name}")
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        section = module.run()
        doc = replace_section(doc, name, f"{section.rstrip()}\n\n_Measured {stamp} on {machine()}._")
        DOC.parent.mkdir(parents=True, exist_ok=True)
        DOC.write_text(doc)
        sys.stdout.write(section + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
