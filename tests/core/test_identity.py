"""Parsing the host's identity: tpu-env lines, endpoint lists, and every bad value left empty and named."""

from __future__ import annotations

import pytest

from watchdog.core.identity import (
    AGENT_WORKER_NUMBER,
    HOST_FIELDS,
    INSTANCE_ID,
    TPU_ENV,
    WORKER_ENDPOINTS,
    WORKER_ID,
    ZONE,
    HostIdentity,
    host_fields,
    identity_from,
    parse_endpoints,
    parse_tpu_env,
)

# The lines of a real v4 VM's tpu-env that matter here (the rest of a real one, long URLs, included as noise),
# plus the Megascale keys of a Multislice slice.
REAL_TPU_ENV = """ACCELERATOR_TYPE: 'v4-256'
AGENT_BOOTSTRAP_IMAGE: 'gcr.io/cloud-tpu-v2-images/instance_agent:stable'
CHIPS_PER_HOST_BOUNDS: '2,2,1'
INJECT_SLICE_BUILDER_FAULT: ''
MEGASCALE_COORDINATOR_ADDRESS: '10.130.0.5:8080'
MEGASCALE_NUM_SLICES: '2'
MEGASCALE_SLICE_ID: '1'
NODE_ID: 'train-v4-256-b'
TOPOLOGY: '4x4x8'
WORKER_ID: '7'
ZONE: 'us-central2-b'
"""


def test_tpu_env_lines() -> None:
    values, bad = parse_tpu_env(REAL_TPU_ENV + "not a line\nLOWER: 'x' trailing\n\nBARE: 12\n")
    assert values["NODE_ID"] == "train-v4-256-b"
    assert values["INJECT_SLICE_BUILDER_FAULT"] == ""
    assert values["BARE"] == "12"
    assert bad == 2


@pytest.mark.parametrize(
    ("text", "hosts"),
    [("10.0.0.2", 1), ("a:0:10.0.0.2,b:1:10.0.0.3", 2), (" 10.0.0.2 , 10.0.0.3 ", 2), ("", None),
     ("10.0.0.2,,10.0.0.3", None), ("10.0.0.2;rm -rf", None)],
)  # fmt: skip
def test_endpoint_lists(text: str, hosts: int | None) -> None:
    assert parse_endpoints(text) == hosts


def test_a_multislice_host() -> None:
    identity, problems = identity_from(
        {
            INSTANCE_ID: "4520031799277581759\n",
            ZONE: "projects/1/zones/us-central2-b",
            AGENT_WORKER_NUMBER: "7",
            WORKER_ID: "7",
            WORKER_ENDPOINTS: ",".join(f"w-{i}:{i}:10.0.0.{i + 2}" for i in range(32)),
            TPU_ENV: REAL_TPU_ENV,
        }
    )
    assert problems == []
    assert identity == HostIdentity(
        instance_id="4520031799277581759", zone="us-central2-b", accelerator_type="v4-256", worker_id="7",
        tpu_node="train-v4-256-b", slice_hosts=32, slice_id="1", num_slices="2",
        multislice_coordinator="10.130.0.5:8080",
    )  # fmt: skip
    assert identity.labels()["slice_hosts"] == "32"
    assert "instance_name" not in identity.to_dict()


def test_nothing_known_is_no_problem() -> None:
    identity, problems = identity_from({})
    assert (identity, problems) == (HostIdentity(), [])
    assert set(identity.labels().values()) == {""}


def test_bad_values_are_left_empty_and_named() -> None:
    identity, problems = identity_from(
        {
            INSTANCE_ID: "not-a-number",
            AGENT_WORKER_NUMBER: "3",
            WORKER_ID: "4",
            WORKER_ENDPOINTS: "10.0.0.2,,",
            TPU_ENV: "NODE_ID: 'a node with spaces'\nMEGASCALE_NUM_SLICES: 'two'\ngarbage\n" + "x" * 300,
        }
    )
    assert identity.instance_id == identity.tpu_node == identity.num_slices == ""
    assert identity.worker_id == "3"  # agent-worker-number wins, and the disagreement is said
    assert identity.slice_hosts == 0
    said = "\n".join(problems)
    for named in (INSTANCE_ID, "NODE_ID", "MEGASCALE_NUM_SLICES", WORKER_ENDPOINTS, "disagree", "2 line(s)"):
        assert named in said
    assert len(problems) == 6


def test_a_long_value_never_becomes_a_label() -> None:
    identity, problems = identity_from({TPU_ENV: f"NODE_ID: '{'n' * 200}'\n"})
    assert identity.tpu_node == ""
    assert problems


def test_the_host_object_of_webhooks_and_history_every_field_or_the_known_ones() -> None:
    identity = HostIdentity(
        instance_id="42", instance_name="t1v-n-0", zone="us-central2-b", accelerator_type="v4-16",
        worker_id="1", tpu_node="train-a", slice_hosts=2, slice_id="0", num_slices="2",
        multislice_coordinator="10.130.0.5:8080",
    )  # fmt: skip
    assert host_fields(identity.labels()) == {
        "instance_id": "42", "name": "t1v-n-0", "zone": "us-central2-b", "accelerator_type": "v4-16",
        "worker": "1", "tpu_node": "train-a", "slice_hosts": "2", "slice_id": "0", "num_slices": "2",
        "multislice_coordinator": "10.130.0.5:8080",
    }  # fmt: skip
    partial = HostIdentity(zone="us-central2-b", worker_id="1").labels()  # the metadata server is slow
    assert host_fields(partial, known_only=True) == {"zone": "us-central2-b", "worker": "1"}
    assert set(host_fields(partial)) == set(HOST_FIELDS)  # a webhook: every field, "" where unknown
    assert host_fields(HostIdentity().labels(), known_only=True) == {}
