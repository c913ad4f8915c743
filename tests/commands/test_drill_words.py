"""What `drill --dry-run` says each holder would go through, from its SIGTERM disposition and on_timeout
(the whole dry run with real holders: tests/commands/test_drill.py)."""

from __future__ import annotations

import pytest

from watchdog.commands.drill import _would_happen
from watchdog.core.ladder import ladder_for
from watchdog.core.process import Holder, ProcessIdentity
from watchdog.core.vocabulary import SIGTERM_UNKNOWN, OnTimeout, SigtermDisposition


def holder(sigterm: SigtermDisposition | None) -> Holder:
    return Holder(ProcessIdentity(4242, 1), "train", ("python3",), 0, ("/dev/accel0",), sigterm=sigterm)


@pytest.mark.parametrize(
    ("sigterm", "on_timeout", "said"),
    [
        (
            SigtermDisposition.CAUGHT,
            "kill",
            "would get SIGTERM now (it has a handler), then after 300 s: SIGKILL",
        ),
        (
            SigtermDisposition.DEFAULT,
            "kill",
            "would get SIGTERM now and die of it at once: it has no handler",
        ),
        (SigtermDisposition.IGNORED, "kill", "ignore it: after 300 s, SIGKILL (its progress lost)"),
        # Left running, nothing is lost at the deadline: the maintenance stops it later.
        (SigtermDisposition.IGNORED, "leave", "ignore it: after 300 s, left running and reported"),
        # /proc did not say: the line must not read as a handler's.
        (None, "kill", f"what it does with it unknown ({SIGTERM_UNKNOWN})"),
    ],
)
def test_each_disposition_is_said_as_what_would_happen(
    sigterm: SigtermDisposition | None, on_timeout: OnTimeout, said: str
) -> None:
    line = _would_happen(holder(sigterm), ladder_for(on_timeout), 300.0)
    assert said in line
    assert "progress lost" not in line or on_timeout == "kill"
