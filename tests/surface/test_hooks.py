"""Hooks as real child processes: their environment, output bound, timeouts, failures, and shutdown."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.failing_logs import every_line_raising
from tests.support.waiting import wait_for
from watchdog.config.settings import default_config
from watchdog.surface import hooks as hooks_module
from watchdog.surface.hooks import HookContext, HookResult, HookRun, HookRunner

CONTEXT = HookContext(
    "maintenance-event",
    "TERMINATE_ON_HOST_MAINTENANCE",
    event_id="ev-7",
    deadline=1_800_000_300.0,
    dry_run=True,
)


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@pytest.fixture
def runners() -> Iterator[list[HookRunner]]:
    made: list[HookRunner] = []
    yield made
    for runner in made:
        runner.close(5.0)


def runner_for(
    runners: list[HookRunner], argv: list[str] | None, timeout: float = 20.0, **kw: int
) -> HookRunner:
    runner = HookRunner(
        {"on_event_start": argv}, timeout, environ={"PATH": os.environ["PATH"], "KEEP": "me"}, **kw
    )
    runners.append(runner)
    return runner


def finish(run: HookRun | None) -> HookResult:
    assert run is not None
    result = run.wait(20.0)
    assert result is not None, "the hook did not finish"
    return result


def test_the_environment_and_argv_reach_the_hook_without_a_shell(runners: list[HookRunner]) -> None:
    code = (
        "import json, os, sys; print(json.dumps({'env': dict(os.environ), 'argv': sys.argv[1:], "
        "'stdin': os.readlink('/proc/self/fd/0'), 'pgid_is_own': os.getpgid(0) == os.getpid()}))"
    )
    runner = runner_for(runners, [*python(code), "$HOME", "a b;true"])
    result = finish(runner.run_hook("on_event_start", CONTEXT))
    assert result.status == "ok", result
    seen = json.loads(result.output)
    env = seen["env"]
    assert env["TPU_WATCHDOG_HOOK"] == "on_event_start"
    assert env["TPU_WATCHDOG_EVENT"] == "maintenance-event=TERMINATE_ON_HOST_MAINTENANCE"
    assert env["TPU_WATCHDOG_EVENT_ID"] == "ev-7"
    assert env["TPU_WATCHDOG_DEADLINE"] == "2027-01-15T08:05:00Z"
    assert env["TPU_WATCHDOG_DEADLINE_EPOCH"] == "1800000300.000"
    assert env["TPU_WATCHDOG_DRY_RUN"] == "1"
    assert env["TPU_WATCHDOG_OUTCOME"] == ""
    assert env["KEEP"] == "me"
    assert seen["argv"] == ["$HOME", "a b;true"]  # no shell expanded or split anything
    assert seen["stdin"] == "/dev/null"
    assert seen["pgid_is_own"] is True


def test_a_hanging_hook_is_killed_with_its_group_and_run_hook_returns_at_once(
    runners: list[HookRunner], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pid_file = tmp_path / "child.pid"
    code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen(['sleep', '60'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "print('waiting', flush=True)\n"
        "time.sleep(60)\n"
    )
    runner = runner_for(runners, python(code), timeout=1.0)
    with caplog.at_level(logging.INFO, logger="watchdog.surface.hooks"):
        run = runner.run_hook("on_event_start", CONTEXT)
        assert run is not None
        assert not run.done  # returned while the hook runs
        grandchild = int(
            wait_for(lambda: pid_file.exists() and pid_file.read_text(), what="the hook's child")
        )
        result = finish(run)
    assert result.status == "timed_out"
    assert result.returncode == -signal.SIGKILL
    assert result.output.strip() == "waiting"
    wait_for(lambda: not _alive(grandchild), what="the hook's own child to be killed with its group")
    assert "timed out" in caplog.text


def test_a_failing_hook_is_logged_not_raised(
    runners: list[HookRunner], caplog: pytest.LogCaptureFixture
) -> None:
    runner = runner_for(runners, python("import sys; print('disk full'); sys.exit(3)"))
    with caplog.at_level(logging.INFO, logger="watchdog.surface.hooks"):
        result = finish(runner.run_hook("on_event_start", CONTEXT))
    assert (result.status, result.returncode) == ("failed", 3)
    assert "exited 3" in caplog.text
    assert "disk full" in caplog.text


def test_a_missing_executable_is_logged_not_raised(
    runners: list[HookRunner], caplog: pytest.LogCaptureFixture
) -> None:
    runner = runner_for(runners, ["/nonexistent/bin/page-the-sre", "--now"])
    with caplog.at_level(logging.INFO, logger="watchdog.surface.hooks"):
        result = finish(runner.run_hook("on_event_start", CONTEXT))
    assert result.status == "not_run"
    assert result.returncode is None
    assert "No such file" in result.error
    assert "could not be run" in caplog.text


def test_output_is_bounded(runners: list[HookRunner]) -> None:
    runner = runner_for(runners, python("import sys; sys.stdout.write('x' * 1_000_000)"), output_limit=1000)
    result = finish(runner.run_hook("on_event_start", CONTEXT))
    assert result.status == "ok"
    assert result.output == "x" * 1000
    assert result.dropped_bytes == 999_000


def test_a_background_child_holding_the_output_open_does_not_hold_the_result(
    runners: list[HookRunner],
) -> None:
    runner = runner_for(runners, ["sh", "-c", "sleep 30 & echo $!; echo started"])
    result = finish(runner.run_hook("on_event_start", CONTEXT))
    leftover = int(result.output.split()[0])
    os.kill(leftover, signal.SIGKILL)  # it outlived its hook by design; the test cleans it up
    assert result.status == "ok"
    assert result.output.split()[1] == "started"


def test_close_kills_hooks_still_running(runners: list[HookRunner]) -> None:
    runner = runner_for(runners, python("import time; time.sleep(60)"), timeout=60.0)
    run = runner.run_hook("on_event_start", CONTEXT)
    assert runner.close(0.2) is False
    result = finish(run)
    assert result.status == "killed"
    assert runner.run_hook("on_event_start", CONTEXT) is None  # nothing starts after close


def test_close_waits_for_hooks_that_finish(runners: list[HookRunner]) -> None:
    runner = runner_for(runners, python("pass"))
    run = runner.run_hook("on_event_start", CONTEXT)
    assert runner.close(20.0) is True
    assert finish(run).status == "ok"


def test_no_command_means_nothing_runs(runners: list[HookRunner]) -> None:
    runner = HookRunner.from_config(default_config())
    runners.append(runner)
    assert runner.run_hook("on_drain_end", CONTEXT) is None
    with pytest.raises(ValueError, match="unknown hook"):
        runner.run_hook("on_lunch", CONTEXT)


def _alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie nobody has reaped yet."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_without_pidfds_exits_and_timeouts_are_still_seen(
    runners: list[HookRunner], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kernels before 5.3 have no pidfd: the runner polls the child instead."""
    monkeypatch.setattr(hooks_module, "_pidfd_open", lambda pid: None)
    failing = runner_for(runners, python("import sys; sys.exit(4)"))
    assert finish(failing.run_hook("on_event_start", CONTEXT)).returncode == 4
    hanging = runner_for(runners, python("import time; time.sleep(60)"), timeout=0.3)
    assert finish(hanging.run_hook("on_event_start", CONTEXT)).status == "timed_out"


def test_a_deadline_past_year_9999_is_told_to_the_hook_not_raised() -> None:
    """A far deadline (a huge grace) once raised while the hook's environment was built: no hook ran."""
    env = HookContext("maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE", deadline=1.0e12).environment(
        "on_event_start"
    )
    assert env["TPU_WATCHDOG_DEADLINE"] == "9999-12-31T23:59:59Z"
    assert env["TPU_WATCHDOG_DEADLINE_EPOCH"] == "1000000000000.000"


def test_a_hook_whose_result_line_raises_still_finishes(runners: list[HookRunner]) -> None:
    """The line of a hook's result, raising (a broken journal), once left the run unfinished: whoever
    waited on it (the end of a drain, shutdown) waited its whole timeout."""
    runner = runner_for(runners, python("print('done')"))
    with every_line_raising(hooks_module.__name__) as lines:
        run = runner.run_hook("on_event_start", CONTEXT)
        assert run is not None
        wait_for(lambda: run.done, what="the hook's run finished")
    assert run.result is not None
    assert run.result.status == "ok", run.result
    assert lines.refused("succeeded")
