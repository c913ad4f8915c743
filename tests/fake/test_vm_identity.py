"""fake/vm_identity.py: one `TpuIdentity` gives every identity key of a TPU VM, consistent across them,
and the daemon's own reader (core/identity.py) takes each back without a complaint; bad identities are refused
naming the field."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from watchdog.core.identity import identity_from
from watchdog.fake.vm_identity import (
    IDENTITY_KEYS,
    TPU_FIELDS,
    GpuIdentity,
    TpuIdentity,
    identity_from_fields,
    parse_identity,
)


def test_a_multislice_host_reads_back_as_the_daemon_sees_it() -> None:
    given = TpuIdentity("v5litepod-16", "train-b", worker=2, hosts=4, zone="us-west4-a", slice_id=1,
                        num_slices=2, coordinator="10.130.0.2:8476")  # fmt: skip
    identity, problems = identity_from(given.values())
    assert problems == []
    assert (identity.accelerator_type, identity.tpu_node) == ("v5litepod-16", "train-b")
    assert identity.worker_id == "2"
    assert (identity.slice_hosts, identity.slice_id, identity.num_slices) == (4, "1", "2")
    assert (identity.zone, identity.multislice_coordinator) == ("us-west4-a", "10.130.0.2:8476")
    assert identity.instance_name == "t1v-n-" + given.values()["instance/name"].split("-")[2] + "-w-2"


def test_each_host_of_a_node_is_its_own_vm_and_stays_the_same_vm() -> None:
    hosts = [TpuIdentity(node="n", worker=w, hosts=3).values() for w in range(3)]
    assert len({h["instance/id"] for h in hosts}) == 3
    assert len({h["instance/name"] for h in hosts}) == 3
    assert TpuIdentity(node="n", worker=1, hosts=3).values() == hosts[1]  # derived, not random
    assert len({h["instance/attributes/worker-network-endpoints"] for h in hosts}) == 1  # the slice's list


def test_one_slice_serves_no_megascale_keys() -> None:
    env = TpuIdentity().values()["instance/attributes/tpu-env"]
    assert "MEGASCALE" not in env
    assert "NODE_ID: 'fake-tpu'" in env


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"worker": 4, "hosts": 4}, "worker 4"),
        ({"slice_id": 0}, "both slice_id and num_slices"),
        ({"slice_id": 2, "num_slices": 2}, "slice_id 2"),
        ({"node": "a b"}, "node"),
        ({"nodes": "x"}, "unknown identity field"),
        ({"hosts": "many"}, "hosts must be a whole number"),
        ({"worker": True}, "worker must be a whole number"),
    ],
)
def test_a_bad_identity_is_refused_naming_what_is_wrong(given: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        identity_from_fields(given)


def test_the_command_line_form() -> None:
    parsed = parse_identity(
        "node=my-slice,worker=3,hosts=4,accelerator_type=v5litepod-16,slice_id=1,num_slices=2"
    )
    assert parsed == TpuIdentity("v5litepod-16", "my-slice", worker=3, hosts=4, slice_id=1, num_slices=2)
    with pytest.raises(ValueError, match="expected FIELD=VALUE"):
        parse_identity("node")
    assert "coordinator" in TPU_FIELDS


# --- GPU VMs ----------------------------------------------------------------------------------------------
def test_a_gpu_vm_has_its_machine_type_stops_for_maintenance_and_has_no_tpu_attributes() -> None:
    values = GpuIdentity().values()
    assert values["instance/machine-type"] == "projects/123456789012/machineTypes/a3-highgpu-8g"
    assert values["instance/scheduling/on-host-maintenance"] == "TERMINATE"
    assert not [path for path in values if path.startswith("instance/attributes/")]
    assert values["instance/zone"] == "projects/123456789012/zones/us-central1-a"
    assert values["instance/hostname"].startswith("fake-gpu-vm.us-central1-a.")
    assert GpuIdentity(instance_name="b").values()["instance/id"] != values["instance/id"]
    assert set(values) <= IDENTITY_KEYS
    assert set(TpuIdentity().values()) <= IDENTITY_KEYS


def test_the_command_line_and_the_control_fields_say_gpu_by_the_machine_type() -> None:
    assert parse_identity("a3-highgpu-8g") == GpuIdentity()
    assert parse_identity("a3-megagpu-8g,zone=us-east5-a") == GpuIdentity("a3-megagpu-8g", "us-east5-a")
    assert identity_from_fields({"machine_type": "g2-standard-8"}) == GpuIdentity("g2-standard-8")
    assert identity_from_fields({"machine_type": "ct5lp-hightpu-4t"}) == TpuIdentity(
        machine_type="ct5lp-hightpu-4t"
    )


@pytest.mark.parametrize(
    ("make", "named"),
    [
        (
            lambda: parse_identity("a3-highgpu-8g,worker=1"),
            r"GPU VM: it takes .* not the TPU field\(s\) \['worker'\]",
        ),
        (lambda: TpuIdentity(machine_type="a3-highgpu-8g"), "a GPU VM's, not a TPU VM's"),
        (lambda: GpuIdentity("n1-standard-8"), "not a GPU machine type: one of the families a2, a3"),
        (lambda: GpuIdentity(zone="us central"), "zone"),
        (lambda: parse_identity("v5litepod-16"), "expected FIELD=VALUE"),
    ],
)
def test_a_bad_gpu_identity_is_refused_naming_what_is_wrong(make: Callable[[], object], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        make()
