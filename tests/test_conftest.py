"""The run order of tests/conftest.py: the long tests first, expensive module fixtures on one worker.

A prefix that no longer names a test (a module moved or a test renamed) would silently drop that test back
into collection order, where it can start last and stretch the parallel run: these tests catch that.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import ONE_WORKER, RUN_FIRST, pytest_xdist_make_scheduler, rank
from tests.support.scheduling import GroupsByPath

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
    ranks = [rank(item.nodeid) for item in request.session.items]
    assert ranks == sorted(ranks)


class FakeWorker:
    """What the scheduler sees of a pytest-xdist worker: the indices it is sent, run one at a time."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.todo: list[int] = []
        self.ran: list[int] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.todo += indices

    def shutdown(self) -> None:
        self.shutting_down = True


def play(nodeids: list[str], workers: int = 4) -> list[FakeWorker]:
    """The whole run as `--dist loadgroup` schedules it, each worker finishing its tests in turn."""
    config = SimpleNamespace(
        getvalue={"tx": [f"{workers}*popen"], "dist": "loadgroup"}.__getitem__,
        option=SimpleNamespace(loadscopereorder=True),  # xdist's default
    )
    scheduler = pytest_xdist_make_scheduler(config, None)  # type: ignore[arg-type]
    assert isinstance(scheduler, GroupsByPath)
    nodes = [FakeWorker(f"gw{i}") for i in range(workers)]
    for node in nodes:
        scheduler.add_node(node)  # type: ignore[arg-type]
        scheduler.add_node_collection(node, nodeids)  # type: ignore[arg-type]
    scheduler.schedule()
    while any(node.todo for node in nodes):
        for node in filter(lambda n: n.todo, nodes):
            node.ran.append(node.todo.pop(0))
            scheduler.mark_test_complete(node, node.ran[-1])  # type: ignore[arg-type]
    assert scheduler.tests_finished
    return nodes


def workers_of(nodes: list[FakeWorker], nodeids: list[str], path: str) -> set[str]:
    return {node.gateway.id for node in nodes for i in node.ran if nodeids[i].startswith(f"{path}::")}


def test_a_group_is_one_workers_and_the_units_go_out_in_the_run_order() -> None:
    soak, deb = "tests/system/test_soak.py", "tests/system/packaging/test_deb.py"
    nodeids = [f"{soak}::test_a", *(f"{deb}::test_{i}" for i in range(6))]
    nodeids += [f"tests/core/test_x.py::test_{i}" for i in range(12)]
    nodes = play(nodeids)
    assert sorted(i for node in nodes for i in node.ran) == list(range(len(nodeids)))
    assert workers_of(nodes, nodeids, deb) == {"gw1"}
    # The soak first (xdist's default order would hand the biggest group out first), the group second.
    assert [node.ran[0] for node in nodes] == [0, 1, 7, 8]


def test_every_group_of_this_session_runs_on_one_worker(request: pytest.FixtureRequest) -> None:
    nodeids = [item.nodeid for item in request.session.items]
    nodes = play(nodeids)
    assert sorted(i for node in nodes for i in node.ran) == list(range(len(nodeids)))
    for path in ONE_WORKER:
        assert len(workers_of(nodes, nodeids, path)) <= 1, path


def test_other_dist_modes_keep_xdists_scheduler() -> None:
    config = SimpleNamespace(getvalue={"dist": "load"}.__getitem__)
    assert pytest_xdist_make_scheduler(config, None) is None  # type: ignore[arg-type]
