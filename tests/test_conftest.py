"""The run order of tests/conftest.py: the long tests first, expensive module fixtures on one worker.

A prefix that no longer names a test (a module moved or a test renamed) would silently drop that test back
into collection order, where it can start last and stretch the parallel run: these tests catch that.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ONE_WORKER, RUN_FIRST, rank

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("prefix", RUN_FIRST)
def test_every_prefix_of_the_run_order_names_tests(prefix: str) -> None:
    path, _, name = prefix.partition("::")
    target = REPO / path
    if path.endswith("/"):
        assert any(target.rglob("test_*.py")), f"{prefix}: no test module under {path}"
    else:
        assert target.is_file(), f"{prefix}: no {path}"
        if name:
            assert f"def {name}(" in target.read_text(), f"{prefix}: no test {name} in {path}"


@pytest.mark.parametrize("path", sorted(ONE_WORKER))
def test_every_one_worker_module_exists(path: str) -> None:
    assert (REPO / path).is_file()


def test_the_long_ones_go_first_and_the_rest_keep_their_place() -> None:
    assert rank("tests/system/test_soak.py::test_a_60_second_soak_keeps_every_promise") == 0
    down_30_s = rank("tests/system/test_daemon_faults.py::test_metadata_server_down_for_30_s")
    assert down_30_s < rank("tests/system/test_daemon_faults.py::test_garbage_values_are_errors_never_events")
    assert rank("tests/core/test_policy.py::test_x") == rank("tests/store/test_records.py::test_y")
    assert rank("tests/core/test_policy.py::test_x") == len(RUN_FIRST)


def test_this_session_runs_in_that_order(request: pytest.FixtureRequest) -> None:
    items = request.session.items
    ranks = [rank(item.nodeid) for item in items]
    assert ranks == sorted(ranks)
    for item in items:
        group = ONE_WORKER.get(item.nodeid.partition("::")[0])
        if group is not None:
            mark = item.get_closest_marker("xdist_group")
            assert mark is not None, item.nodeid
            assert mark.args == (group,), item.nodeid
