"""A VM's identity as the metadata server shows it, consistent across its keys, for the fake to serve.

Two kinds of VM, told apart by the machine type, as on the real server:
- `TpuIdentity` (the slice's node name, accelerator type, this host's worker number, the slice's host count,
  and for Multislice the slice index, slice count and coordinator) gives every key a real TPU VM has for
  it: instance id and name, zone, machine type, accelerator-type, worker-id, agent-worker-number,
  worker-network-endpoints (`name:id:ip` triples) and tpu-env (`KEY: 'value'` lines, the keys a real VM
  lists that matter here).
- `GpuIdentity` (an accelerator-optimized machine type such as a3-highgpu-8g) gives a GPU VM's keys: the
  same instance keys, no TPU attributes (a GPU VM has none), and on-host-maintenance TERMINATE (GPU VMs
  cannot live-migrate).
Both own the same instance keys (`IDENTITY_KEYS`), so setting one removes what the other served. Set per
fake from `fake-metadata --identity` or `POST /_fake/identity`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

ATTRIBUTES = "instance/attributes"
PROJECT = "fake-project"
PROJECT_NUMBER = "123456789012"
TPU_MACHINE_TYPE = "ct4p-hightpu-4t"  # a v4 host
GPU_MACHINE_TYPE = "a3-highgpu-8g"  # 8 H100 80GB
# Accelerator-optimized families whose machine type attaches GPUs (A2 A100, A3 H100/H200, A4 B200, A4X GB200,
# G2 L4, G4 RTX PRO 6000). An N1 VM with GPUs added is not told apart by its machine type.
GPU_FAMILIES = ("a2", "a3", "a4", "a4x", "g2", "g4")


def is_gpu_machine_type(machine_type: str) -> bool:
    return machine_type.split("-", 1)[0] in GPU_FAMILIES


def _check_text(identity: object, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(identity, name)
        if value == "" and name == "machine_type":
            raise ValueError("machine_type must not be empty")
        if any(c.isspace() or c in "'\",/" for c in value):
            raise ValueError(f"{name} {value!r}: no spaces, quotes, commas or slashes")


def _tag(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _vm_keys(name: str, instance_id: str, zone: str, machine_type: str) -> dict[str, str]:
    """The instance keys every VM has, TPU or GPU."""
    return {
        "instance/id": instance_id,
        "instance/name": name,
        "instance/hostname": f"{name}.{zone}.c.{PROJECT}.internal",
        "instance/zone": f"projects/{PROJECT_NUMBER}/zones/{zone}",
        "instance/machine-type": f"projects/{PROJECT_NUMBER}/machineTypes/{machine_type}",
        # Neither a TPU VM nor a GPU VM can live-migrate: both stop for host maintenance.
        "instance/scheduling/on-host-maintenance": "TERMINATE",
    }


@dataclass(frozen=True)
class TpuIdentity:
    accelerator_type: str = "v4-8"
    node: str = "fake-tpu"  # the TPU node (the slice): tpu-env NODE_ID
    worker: int = 0  # this host's index in the slice
    hosts: int = 1  # hosts in the slice
    zone: str = "us-central2-b"
    slice_id: int | None = None  # Multislice only: this slice's index, the slice count, the coordinator
    num_slices: int | None = None
    coordinator: str = ""
    instance_id: str = ""  # "" : derived from the node and the worker, stable for the same two
    instance_name: str = ""  # "" : t1v-n-HASH-w-WORKER, as the real VMs of a node are named
    machine_type: str = TPU_MACHINE_TYPE

    def __post_init__(self) -> None:
        if not 0 <= self.worker < self.hosts:
            raise ValueError(f"worker {self.worker} is not one of the slice's {self.hosts} hosts (0..N-1)")
        multislice = (self.slice_id, self.num_slices)
        if (None in multislice) != (multislice == (None, None)):
            raise ValueError("give both slice_id and num_slices (Multislice), or neither")
        if self.num_slices is not None and not 0 <= (self.slice_id or 0) < self.num_slices:
            raise ValueError(f"slice_id {self.slice_id} is not one of {self.num_slices} slices")
        _check_text(self, ("accelerator_type", "node", "zone", "coordinator", "instance_id", "instance_name",
                           "machine_type"))  # fmt: skip
        if is_gpu_machine_type(self.machine_type):
            raise ValueError(f"machine_type {self.machine_type} is a GPU VM's, not a TPU VM's (GpuIdentity)")

    def values(self) -> dict[str, str]:
        """Every key of this identity, path -> the text the metadata server serves."""
        tag = _tag(self.node)
        name = self.instance_name or f"t1v-n-{tag}-w-{self.worker}"
        instance_id = self.instance_id or str(int(tag, 16) * 1000 + self.worker)
        subnet = int(tag[:2], 16)
        addresses = (f"10.{subnet}.{w // 250}.{w % 250 + 2}" for w in range(self.hosts))
        endpoints = ",".join(f"{tag}-w-{w}:{w}:{ip}" for w, ip in enumerate(addresses))
        env = {
            "ACCELERATOR_TYPE": self.accelerator_type,
            "CONSUMER_PROJECT_ID": PROJECT,
            "NODE_ID": self.node,
            "WORKER_ID": str(self.worker),
            "ZONE": self.zone,
        }
        if self.num_slices is not None:
            env["MEGASCALE_COORDINATOR_ADDRESS"] = self.coordinator or f"10.{subnet}.0.2:8080"
            env["MEGASCALE_NUM_SLICES"] = str(self.num_slices)
            env["MEGASCALE_SLICE_ID"] = str(self.slice_id)
        return {
            **_vm_keys(name, instance_id, self.zone, self.machine_type),
            f"{ATTRIBUTES}/accelerator-type": self.accelerator_type,
            f"{ATTRIBUTES}/worker-id": str(self.worker),
            f"{ATTRIBUTES}/agent-worker-number": str(self.worker),
            f"{ATTRIBUTES}/worker-network-endpoints": endpoints,
            f"{ATTRIBUTES}/tpu-env": "".join(f"{k}: '{v}'\n" for k, v in sorted(env.items())),
        }


@dataclass(frozen=True)
class GpuIdentity:
    machine_type: str = GPU_MACHINE_TYPE
    zone: str = "us-central1-a"
    instance_id: str = ""  # "" : derived from the instance name, stable for the same name
    instance_name: str = "fake-gpu-vm"

    def __post_init__(self) -> None:
        _check_text(self, ("machine_type", "zone", "instance_id", "instance_name"))
        if not is_gpu_machine_type(self.machine_type):
            raise ValueError(
                f"machine_type {self.machine_type!r} is not a GPU machine type: one of the families "
                f"{', '.join(GPU_FAMILIES)} (e.g. {GPU_MACHINE_TYPE})"
            )

    def values(self) -> dict[str, str]:
        """Every key of this identity, path -> the text the metadata server serves."""
        instance_id = self.instance_id or str(int(_tag(self.instance_name), 16))
        return _vm_keys(self.instance_name, instance_id, self.zone, self.machine_type)


VmIdentity = TpuIdentity | GpuIdentity
TPU_FIELDS = tuple(f.name for f in fields(TpuIdentity))  # every field: a GPU VM takes GPU_FIELDS of them
GPU_FIELDS = tuple(f.name for f in fields(GpuIdentity))
# Every key an identity may own: setting one identity removes those of the others it does not serve.
IDENTITY_KEYS = frozenset(TpuIdentity().values()) | frozenset(GpuIdentity().values())
_INTS = {"worker", "hosts", "slice_id", "num_slices"}


def identity_from_fields(given: Mapping[str, object], base: TpuIdentity | None = None) -> VmIdentity:
    """A TPU VM (`base`, the defaults, with the given fields replaced), or a GPU VM when `machine_type` is
    a GPU one; ValueError naming an unknown field or value."""
    unknown = set(given) - set(TPU_FIELDS)
    if unknown:
        raise ValueError(f"unknown identity field(s) {sorted(unknown)}; known: {', '.join(TPU_FIELDS)}")
    changes: dict[str, object] = {}
    for name, value in given.items():
        if name in _INTS:
            if isinstance(value, bool) or not (isinstance(value, int) or str(value).isdigit()):
                raise ValueError(f"identity field {name} must be a whole number >= 0, not {value!r}")
            changes[name] = int(str(value))
        elif not isinstance(value, str):
            raise ValueError(f"identity field {name} must be text, not {value!r}")
        else:
            changes[name] = value
    machine_type = changes.get("machine_type")
    if isinstance(machine_type, str) and is_gpu_machine_type(machine_type):
        tpu_only = sorted(set(changes) - set(GPU_FIELDS))
        if tpu_only:
            raise ValueError(
                f"{machine_type} is a GPU VM: it takes {', '.join(GPU_FIELDS)}, "
                f"not the TPU field(s) {tpu_only}"
            )
        return GpuIdentity(**changes)  # type: ignore[arg-type]
    return replace(base or TpuIdentity(), **changes)  # type: ignore[arg-type]


def parse_identity(text: str) -> VmIdentity:
    """`--identity node=my-slice,worker=3,hosts=4,accelerator_type=v5litepod-16,slice_id=1,num_slices=2`
    (a TPU VM), or `--identity a3-highgpu-8g[,zone=...,instance_name=...]` (a GPU VM: a bare first item is
    the machine type)."""
    items = [part.strip() for part in text.split(",") if part.strip()]
    if items and "=" not in items[0] and is_gpu_machine_type(items[0]):
        items[0] = f"machine_type={items[0]}"
    pairs = [item.partition("=") for item in items]
    bad = [name for name, eq, _ in pairs if not eq or not name.strip()]
    if bad or not pairs:
        raise ValueError(
            f"--identity {text!r}: expected FIELD=VALUE,... with fields {', '.join(TPU_FIELDS)}, "
            f"or a GPU machine type first (e.g. {GPU_MACHINE_TYPE})"
        )
    return identity_from_fields({name.strip(): value.strip() for name, _, value in pairs})
