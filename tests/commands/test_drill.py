"""`tpu-watchdog drill` for real: real holders, real signals, the verdict per process and the exit status.

Each drill runs in a private PID namespace with its own holders (tests/support/drilling.py).
"""

from __future__ import annotations

from pathlib import Path

from tests.support.drilling import drill, needs_unshare

pytestmark = needs_unshare


def test_jobs_that_handle_sigterm_pass(tmp_path: Path) -> None:
    done = drill(tmp_path, "handled,slow", "--grace", "20")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("exited in time") == 2
    assert "drill exited: 2 processes: 2 exited on SIGTERM" in done.stdout
    assert "alive: False,False" in done.stdout


def test_a_job_without_a_sigterm_handler_is_called_out(tmp_path: Path) -> None:
    done = drill(tmp_path, "default", "--grace", "20")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "DID NOT HANDLE SIGTERM" in done.stdout
    assert "saved no checkpoint" in done.stdout


def test_a_job_that_ignores_sigterm_needs_sigkill(tmp_path: Path) -> None:
    done = drill(tmp_path, "ignore,handled", "--grace", "1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "NEEDED SIGKILL" in done.stdout
    assert "exited in time" in done.stdout
    (totals,) = [line for line in done.stdout.splitlines() if line.startswith("drill timed_out: 2 proc")]
    assert "1 killed at the deadline" in totals
    assert "1 exited on SIGTERM" in totals
    assert "alive: False,False" in done.stdout


def test_dry_run_says_at_once_what_would_be_signalled_and_sends_nothing(tmp_path: Path) -> None:
    done = drill(tmp_path, "default,ignore", "--grace", "3600", "--dry-run")  # an hour's grace: not waited
    assert done.returncode == 4, done.stdout + done.stderr
    assert "2 process(es) hold a TPU device; nothing was sent" in done.stdout
    # What each would do, from its SIGTERM disposition: the default dies at once, the ignoring one waits.
    assert (
        "would get SIGTERM now and die of it at once: it has no handler, so it would save nothing"
        in done.stdout
    )
    assert "would get SIGTERM now and ignore it: after 3600 s, SIGKILL (its progress lost)" in done.stdout
    assert "alive: True,True" in done.stdout
    assert "LOST" not in done.stdout  # a dry run learns nothing: no verdict


def test_on_a_terminal_it_asks_first_and_no_means_nothing_is_signalled(tmp_path: Path) -> None:
    done = drill(tmp_path, "default", "--grace", "20", answer="n")
    assert done.returncode == 5, done.stdout + done.stderr
    assert "[y/N]" in done.stderr
    assert "not confirmed: nothing was signalled" in done.stdout
    assert "alive: True" in done.stdout


def test_on_a_terminal_yes_drills(tmp_path: Path) -> None:
    done = drill(tmp_path, "handled", "--grace", "20", answer="y")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "drill exited: 1 process: 1 exited on SIGTERM" in done.stdout
    assert "alive: False" in done.stdout


def test_yes_skips_the_question(tmp_path: Path) -> None:
    done = drill(tmp_path, "handled", "--grace", "20", "--yes", answer="n")  # "n" is typed, never read
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[y/N]" not in done.stderr


def test_no_holders_is_exit_3(tmp_path: Path) -> None:
    done = drill(tmp_path, "", "--grace", "1")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "nothing to rehearse" in done.stdout


def test_a_bad_configuration_is_exit_78(tmp_path: Path) -> None:
    done = drill(tmp_path, "", "--grace", "-5")
    assert done.returncode == 78, done.stdout + done.stderr
    assert "grace" in done.stderr
