"""What the framework tests share: the events, running a plan under a daemon (framework_driver.py, in
private PID and network namespaces), and checking a drain that kept the job's progress or lost it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.frameworks import Framework, required, skip_reason
from tests.support.workloads import UniqueDevice
from watchdog.store.drain_entry import NO_HANDLER, SIGTERM_DEATHS

REPO = Path(__file__).resolve().parents[2]
MAINTENANCE = {"key": "instance/maintenance-event", "value": "TERMINATE_ON_HOST_MAINTENANCE", "clear": "NONE"}
PREEMPTED = {"key": "instance/preempted", "value": "TRUE", "clear": "FALSE"}


def marks(framework: Framework) -> list[pytest.MarkDecorator]:
    """A framework test's marks: slow, and SKIPPED with the reason where its venv cannot be had (under CI
    not skipped: `base_plan` fails it with the same reason)."""
    reason = skip_reason(framework)
    return [
        pytest.mark.slow,
        pytest.mark.skipif(reason is not None and not required(), reason=reason or ""),
        pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)"),
    ]


@contextmanager
def base_plan(tmp_path: Path, framework: Framework, **fields: Any) -> Iterator[dict[str, Any]]:
    """What every run of a test shares: the framework's launcher in its venv, holding a UniqueDevice."""
    reason = skip_reason(framework)
    if reason is not None:  # only reached under CI (marks): there a framework that cannot run is a failure
        pytest.fail(f"under CI the {framework.name} tests must run: {reason}")
    with UniqueDevice(tmp_path) as node:
        yield {
            "device": str(node.path),
            "python": str(framework.venv / "bin" / "python"),
            "launcher": str(REPO / "tests" / "support" / f"{framework.name}_launcher.py"),
            **fields,
        }


def drive(tmp_path: Path, plan: dict[str, Any], runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run `runs` one after the other under one daemon; what each did (exit, the drain's entry as /status
    `last_drain` has it and as `history --json` does, log)."""
    full = {**plan, "tmp": str(tmp_path), "result": str(tmp_path / "result.json"), "runs": runs}
    (tmp_path / "plan.json").write_text(json.dumps(full))
    done = subprocess.run(
        ["unshare", "--pid", "--net", "--fork", "--kill-child", "--mount-proc", sys.executable, "-m",
         "tests.support.framework_driver", str(tmp_path / "plan.json")],
        capture_output=True, text=True, timeout=2300, check=False, cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    daemon_log = (tmp_path / "daemon.log").read_text() if (tmp_path / "daemon.log").exists() else ""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:] + daemon_log[-3000:]
    results: list[dict[str, Any]] = json.loads((tmp_path / "result.json").read_text())
    return results


def assert_kept_progress(result: dict[str, Any], exit_status: int) -> None:
    """The run's drain ended `exited` with nothing lost (its process exited, not of SIGTERM's default
    action), the job having exited with `exit_status`."""
    drain = result["drain"]
    assert drain is not None, result["log"][-3000:]
    assert drain["outcome"] == "exited", drain
    [proc] = drain["processes"]
    assert proc["exit_status"] == exit_status, (proc, result["log"][-3000:])
    assert proc["end"] == "exited", proc
    assert proc["detail"] not in SIGTERM_DEATHS, proc


def assert_lost_progress(result: dict[str, Any]) -> None:
    """It died of SIGTERM's default action: the drain `exited` (in time) and says the progress is lost."""
    drain = result["drain"]
    assert drain["outcome"] == "exited", drain  # it did exit in time ...
    [proc] = drain["processes"]
    assert (proc["end"], proc["exit_status"], proc["exit_signal"]) == ("exited", None, "SIGTERM"), proc
    assert proc["detail"] == NO_HANDLER, proc  # ... and lost its progress: not a success
    entry, words = result["history"], result["history_words"]  # and the history says so, the morning after
    [process] = entry["processes"]
    assert (process["end"], process["signals"]) == ("exited", ["SIGTERM"]), entry
    assert process["sigterm"] == "default", entry  # seen before the signal: no handler yet
    assert "died of SIGTERM's default action" in words, words
    assert "1 died of SIGTERM's default action (no checkpoint)" in words, words
