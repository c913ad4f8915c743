"""watchdog/exitcodes.py: the statuses scripts and systemd depend on are distinct where they must be and said
where users read them (the README's command table, the man page)."""

from __future__ import annotations

import re
from pathlib import Path

from watchdog import exitcodes

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
MAN = (REPO / "packaging" / "deb" / "tpu-watchdog.1").read_text()

# What `run` can end with, as systemd sees it (RestartPreventExitStatus, Restart=); never "cannot listen":
# a listen address it cannot bind is retried while the daemon protects the host.
RUN = {
    exitcodes.EXIT_OK: "stopped cleanly",
    exitcodes.EXIT_CANTCREAT: "unusable state dir",
    exitcodes.EXIT_LOCKED: "another daemon holds the state dir",
    exitcodes.EXIT_CONFIG: "configuration error",
}


def test_the_statuses_every_command_shares_are_distinct() -> None:
    shared = [exitcodes.EXIT_OK, exitcodes.EXIT_USAGE, exitcodes.EXIT_CANTCREAT, exitcodes.EXIT_LOCKED,
              exitcodes.EXIT_CONFIG, exitcodes.EXIT_INTERRUPTED]  # fmt: skip
    assert len(set(shared)) == len(shared)
    sysexits = (exitcodes.EXIT_CANTCREAT, exitcodes.EXIT_LOCKED, exitcodes.EXIT_CONFIG)
    assert sysexits == (73, 75, 78)  # EX_CANTCREAT, EX_TEMPFAIL, EX_CONFIG


def test_the_readme_lists_every_status_of_run() -> None:
    [row] = [line for line in README.splitlines() if line.startswith("| `tpu-watchdog run ")]
    said = row.rsplit("|", 2)[1]
    for status, meaning in RUN.items():
        assert re.search(rf"\b{status} {meaning}", said), (status, meaning, said)


def test_the_man_page_names_the_statuses_systemd_acts_on() -> None:
    section = MAN.split(".SH EXIT STATUS", 1)[1].split(".SH", 1)[0]
    acted_on = (exitcodes.EXIT_USAGE, exitcodes.EXIT_CANTCREAT, exitcodes.EXIT_LOCKED, exitcodes.EXIT_CONFIG)
    for status in acted_on:
        assert str(status) in section, (status, section)
