"""The framework set-up stays honest: where a framework's venv cannot be built, `make NAME-setup` says why
and that framework's tests are reported SKIPPED with the reason; they never pass without having run.

A machine without a fitting Python is simulated by naming one that does not exist (MAXTEXT_PYTHON, as a
user may) or by asking for a version newer than any (99.0): the same code path as a machine whose newest
Python is 3.11.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.framework_runs import base_plan, marks
from tests.support.frameworks import PAX, RUN_THEM, Framework, find_python, setup, skip_reason

REPO = Path(__file__).resolve().parents[2]
NO_PYTHON = "/nonexistent/python3.12"


def test_no_python_new_enough_is_the_reason_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FUTURE_VENV", str(tmp_path / "venv"))
    future = Framework("future", (99, 0), None)
    assert find_python((99, 0)) is None
    assert skip_reason(future) == "future needs Python >= 99.0, none found (PATH or pyenv)"
    assert setup(future) == 0  # not a failure of `make test`: a skip, said so
    said = capsys.readouterr().out
    assert "no Python >= 99.0 (PATH or pyenv): the future tests will be reported SKIPPED" in said
    assert not (tmp_path / "venv").exists()


def test_make_test_leaves_them_out_and_says_where_they_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(RUN_THEM, raising=False)
    if PAX.python() is None:
        pytest.skip("no Python 3.10 here: the other reason applies (the test above)")
    reason = skip_reason(PAX)
    assert reason is not None
    assert reason.startswith("`make test` leaves the pax tests out")
    assert "`make test-frameworks` sets up" in reason


def test_a_venv_not_set_up_is_the_reason_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAX_VENV", str(tmp_path / "venv"))
    monkeypatch.setenv(RUN_THEM, "1")  # as `make test-frameworks` runs them
    if PAX.python() is None:
        pytest.skip("no Python 3.10 here: the other reason applies (the test above)")
    reason = skip_reason(PAX)
    assert reason is not None
    assert "is not set up: `make pax-setup` builds it" in reason
    (tmp_path / "venv").mkdir()
    (tmp_path / "venv" / ".installed").touch()
    assert skip_reason(PAX) is None
    os.utime(tmp_path / "venv" / ".installed", (0, 0))  # older than the pinned list: to be built again
    assert skip_reason(PAX) is not None


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_says_why_it_builds_nothing_without_a_fitting_python(tmp_path: Path) -> None:
    done = subprocess.run(
        ["make", "-s", "maxtext-setup", f"PYTHON={sys.executable}"],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
        env={**os.environ, "MAXTEXT_PYTHON": NO_PYTHON, "MAXTEXT_VENV": str(tmp_path / "venv")},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    expected = f"no Python >= 3.12 (MAXTEXT_PYTHON={NO_PYTHON}): the maxtext tests will be reported SKIPPED"
    assert expected in done.stdout
    assert not (tmp_path / "venv").exists()


def test_pytest_reports_the_framework_tests_skipped_with_the_reason(tmp_path: Path) -> None:
    nowhere = {"MAXTEXT_PYTHON": NO_PYTHON, "PAX_PYTHON": NO_PYTHON, "MAXTEXT_VENV": str(tmp_path / "m"),
               "PAX_VENV": str(tmp_path / "p")}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         "tests/system/test_maxtext.py", "tests/system/test_pax.py"],
        capture_output=True, text=True, timeout=300, check=False, cwd=REPO, env={**os.environ, **nowhere},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 skipped" in done.stdout
    assert "passed" not in done.stdout
    assert done.stdout.count("SKIPPED [1] tests/system/test_maxtext.py") == 2  # each, with the reason:
    assert f"maxtext needs Python >= 3.12, none found (MAXTEXT_PYTHON={NO_PYTHON})" in done.stdout
    assert f"pax needs Python >= 3.10, < 3.11, none found (PAX_PYTHON={NO_PYTHON})" in done.stdout


def test_under_ci_a_framework_that_cannot_run_fails_instead_of_skipping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv(RUN_THEM, "1")  # as `.ci/run` runs `make test-frameworks`
    monkeypatch.setenv("FUTURE_VENV", str(tmp_path / "venv"))
    future = Framework("future", (99, 0), None)
    assert setup(future) == 1
    assert "under CI the future tests must run, so this is a failure" in capsys.readouterr().out
    skips = [m for m in marks(future) if m.name == "skipif" and m.args and m.args[0]]
    assert not skips  # not skipped: failed by base_plan, with the reason
    must_run = "under CI the future tests must run: future needs Python"
    with pytest.raises(pytest.fail.Exception, match=must_run), base_plan(tmp_path, future):
        pass


def test_outside_ci_the_same_framework_is_a_skip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv(RUN_THEM, "1")
    future = Framework("future", (99, 0), None)
    skips = [m for m in marks(future) if m.name == "skipif" and m.args and m.args[0]]
    assert skips
    assert "future needs Python >= 99.0" in skips[0].kwargs["reason"]
