"""The control API's rules without HTTP (the HTTP path is covered in test_server.py)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from tests.support.waiting import wait_for
from watchdog.fake.control import ControlRequest, handle_control
from watchdog.fake.faults import FaultBook
from watchdog.fake.requestlog import RequestLog, RequestRecord
from watchdog.fake.store import Leaf, MetadataStore


class Control:
    def __init__(self) -> None:
        self.store, self.faults, self.log = MetadataStore(), FaultBook(), RequestLog(capacity=2)

    def __call__(
        self, method: str, path: str, body: bytes = b"", query: str = "", content_type: str = ""
    ) -> tuple[int, Any]:
        request = ControlRequest(method, f"/_fake/{path}", query, body, content_type)
        answer = handle_control(request, self.store, self.faults, self.log)
        return answer.status, json.loads(answer.body)


@pytest.fixture
def control() -> Control:
    return Control()


def test_put_get_delete(control: Control) -> None:
    assert control("PUT", "v1/instance/preempted", b"TRUE")[1]["changed"] is True
    assert control("PUT", "v1/instance/preempted", b"TRUE")[1]["changed"] is False
    status, body = control("GET", "v1/instance/preempted")
    assert (status, body["value"], body["status"]) == (200, "TRUE", 200)
    assert control("DELETE", "v1/instance/preempted")[0] == 200
    assert control("GET", "v1/instance/preempted")[0] == 404


def test_json_content_type_sets_a_json_value(control: Control) -> None:
    control("PUT", "v1/instance/attributes/hosts", b'["a"]', content_type="application/json")
    snapshot = control.store.lookup("instance/attributes/hosts")
    assert isinstance(snapshot, Leaf)
    assert snapshot.value.content == ["a"]


@pytest.mark.parametrize(
    ("method", "path", "body", "query", "status"),
    [
        ("PUT", "v1/instance", b"x", "", 400),  # a directory
        ("PUT", "v1/", b"x", "", 400),  # no key
        ("PUT", "v1/instance/a/../b", b"x", "", 400),
        ("PUT", "v1/instance/preempted", b"\xff", "", 400),
        ("PUT", "v1/instance/preempted", b"TRUE", "status=42", 400),
        ("PATCH", "v1/instance/preempted", b"", "", 405),
        ("GET", "reset", b"", "", 405),
        ("POST", "reset", b'{"path": 1}', "", 400),
        ("POST", "reset", b'{"what": "x"}', "", 400),
        ("POST", "faults", b"not json", "", 400),
        ("POST", "faults", b'{"kind": "status", "count": "2"}', "", 400),
        ("PUT", "faults", b"", "", 405),
        ("POST", "requests", b"", "", 405),
        ("GET", "identity", b"", "", 405),
        ("POST", "identity", b'["node"]', "", 400),
        ("POST", "identity", b'{"nodes": "x"}', "", 400),  # unknown field
        ("POST", "identity", b'{"worker": 4, "hosts": 4}', "", 400),  # no such worker
        ("POST", "identity", b'{"slice_id": 0}', "", 400),  # Multislice needs both
        ("POST", "identity", b'{"node": "a b"}', "", 400),
        ("GET", "v2/instance/preempted", b"", "", 404),
    ],
)
def test_mistakes_get_a_clear_error(
    control: Control, method: str, path: str, body: bytes, query: str, status: int
) -> None:
    got, answer = control(method, path, body, query)
    assert got == status
    assert answer["error"]


def test_requests_are_a_bounded_ring(control: Control) -> None:
    for i in range(3):
        control.log.add(RequestRecord(float(i), "GET", f"k{i}", "", True, 200))
    assert [r["path"] for r in control("GET", "requests")[1]] == ["k1", "k2"]


def test_reset_everything_with_an_empty_body(control: Control) -> None:
    control.store.set("instance/preempted", "TRUE")
    assert control("POST", "reset")[1] == {"reset": "everything", "changed": True}


def test_identity_sets_every_key_of_a_tpu_vm_consistently(control: Control) -> None:
    document = {"node": "train-b", "worker": 3, "hosts": 4, "accelerator_type": "v5litepod-16",
                "slice_id": 1, "num_slices": 2}  # fmt: skip
    status, answer = control("POST", "identity", json.dumps(document).encode())
    assert status == 200
    values = answer["identity"]
    env = values["instance/attributes/tpu-env"]
    assert "NODE_ID: 'train-b'\n" in env
    assert "WORKER_ID: '3'\n" in env
    assert "MEGASCALE_SLICE_ID: '1'\n" in env
    assert "MEGASCALE_NUM_SLICES: '2'\n" in env
    assert "MEGASCALE_COORDINATOR_ADDRESS: '10." in env
    assert values["instance/attributes/agent-worker-number"] == "3"
    assert values["instance/attributes/accelerator-type"] == "v5litepod-16"
    assert len(values["instance/attributes/worker-network-endpoints"].split(",")) == 4
    assert values["instance/name"].endswith("-w-3")
    for path, text in values.items():
        snapshot = control.store.lookup(path)
        assert isinstance(snapshot, Leaf)
        assert snapshot.value.content == text
    assert "instance/attributes/tpu-env" in answer["changed"]
    again = control("POST", "identity", json.dumps({**document, "worker": 0}).encode())[1]["identity"]
    endpoints = "instance/attributes/worker-network-endpoints"
    assert again[endpoints] == values[endpoints]  # the slice's list, the same from any of its hosts
    assert again["instance/id"] != values["instance/id"]


def test_identity_with_a_gpu_machine_type_makes_a_gpu_vm(control: Control) -> None:
    status, answer = control("POST", "identity", b'{"machine_type": "a3-megagpu-8g", "zone": "us-east5-a"}')
    assert status == 200
    assert answer["identity"]["instance/machine-type"].endswith("/machineTypes/a3-megagpu-8g")
    assert "instance/attributes/tpu-env" in answer["changed"]  # gone
    assert control.store.lookup("instance/attributes/accelerator-type") is None
    status, answer = control("POST", "identity", b'{"machine_type": "a3-megagpu-8g", "hosts": 2}')
    assert status == 400
    assert "not the TPU field(s) ['hosts']" in answer["error"]


def test_hanging_counts_the_gets_waiting_now(control: Control) -> None:
    assert control("GET", "hanging") == (200, {"hanging": 0})
    stop = threading.Event()
    waiter = threading.Thread(
        target=control.store.wait_for_change, args=("instance/preempted", None, 30, stop)
    )
    waiter.start()
    try:
        wait_for(lambda: control("GET", "hanging")[1] == {"hanging": 1}, what="the wait to be counted")
    finally:
        stop.set()
        control.store.wake_all()
        waiter.join(10)
    assert control("GET", "hanging") == (200, {"hanging": 0})
    assert control("POST", "hanging")[0] == 405


def test_an_unknown_endpoint_names_the_ones_served(control: Control) -> None:
    got, answer = control("GET", "values/instance/preempted")
    assert got == 404
    served_all = (
        "/_fake/v1/<key>",
        "POST /_fake/reset",
        "POST /_fake/identity",
        "/_fake/faults",
        "GET /_fake/requests",
    )
    for served in served_all:
        assert served in answer["error"]
    assert "docstring" not in answer["error"]
