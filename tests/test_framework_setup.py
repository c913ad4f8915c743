"""The MaxText set-up stays honest: where it cannot be built, `make maxtext-setup` says why and the MaxText
tests are reported SKIPPED with that reason; they never pass without having run.

A Python that is too old for MaxText is simulated by asking for one newer than any that exists (99.0): the
same code path as a machine whose newest Python is 3.11.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.frameworks import find_python, maxtext_skip_reason

REPO = Path(__file__).resolve().parents[1]


def test_no_python_new_enough_is_the_reason_given(tmp_path: Path) -> None:
    assert find_python((99, 0)) is None
    reason = maxtext_skip_reason(tmp_path / "venv", (99, 0))
    assert reason == "MaxText needs Python >= 99.0 and there is none on this machine (PATH or pyenv)"


def test_a_venv_not_set_up_is_the_reason_given(tmp_path: Path) -> None:
    if find_python((3, 12)) is None:
        pytest.skip("no Python >= 3.12 here: the other reason applies (the test above)")
    reason = maxtext_skip_reason(tmp_path / "venv")
    assert reason is not None
    assert "is not set up: `make maxtext-setup` builds it" in reason
    (tmp_path / "venv").mkdir()
    (tmp_path / "venv" / ".installed").touch()
    assert maxtext_skip_reason(tmp_path / "venv") is None


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_says_why_it_builds_nothing_without_a_python_new_enough(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    done = subprocess.run(
        ["make", "-s", "maxtext-setup", f"MAXTEXT_VENV={venv}", "MAXTEXT_PYTHON_MIN=99.0",
         f"PYTHON={sys.executable}"],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr  # not a failure of make test: a skip
    assert "no Python >= 99.0 on PATH or under pyenv" in done.stdout
    assert "the MaxText tests will be reported SKIPPED" in done.stdout
    assert not venv.exists()


def test_pytest_reports_the_maxtext_tests_skipped_with_the_reason(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         "tests/system/test_maxtext.py"],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
        env={**os.environ, "MAXTEXT_VENV": str(tmp_path / "no-venv")},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 skipped" in done.stdout
    assert "passed" not in done.stdout
    assert "SKIPPED" in done.stdout
    assert "MaxText" in done.stdout  # the reason, whichever of the two applies
