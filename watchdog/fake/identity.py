"""A TPU VM's identity as the metadata server shows it, consistent across its keys, for the fake to serve.

One `TpuIdentity` (the slice's node name, accelerator type, this host's worker number, the slice's host
count, and for Multislice the slice index, slice count and coordinator) gives the values of every key a
real TPU VM has for it: instance id and name, zone, accelerator-type, worker-id, agent-worker-number,
worker-network-endpoints (`name:id:ip` triples) and tpu-env (`KEY: 'value'` lines, the keys a real VM
lists that matter here). Set per fake from `fake-metadata --identity` or `POST /_fake/identity`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

ATTRIBUTES = "instance/attributes"
PROJECT = "fake-project"


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

    def __post_init__(self) -> None:
        if not 0 <= self.worker < self.hosts:
            raise ValueError(f"worker {self.worker} is not one of the slice's {self.hosts} hosts (0..N-1)")
        multislice = (self.slice_id, self.num_slices)
        if (None in multislice) != (multislice == (None, None)):
            raise ValueError("give both slice_id and num_slices (Multislice), or neither")
        if self.num_slices is not None and not 0 <= (self.slice_id or 0) < self.num_slices:
            raise ValueError(f"slice_id {self.slice_id} is not one of {self.num_slices} slices")
        for name in ("accelerator_type", "node", "zone", "coordinator", "instance_id", "instance_name"):
            value = getattr(self, name)
            if any(c.isspace() or c in "'\"," for c in value):
                raise ValueError(f"{name} {value!r}: no spaces, quotes or commas")

    def _tag(self) -> str:
        return hashlib.sha256(self.node.encode()).hexdigest()[:8]

    def values(self) -> dict[str, str]:
        """Every key of this identity, path -> the text the metadata server serves."""
        tag = self._tag()
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
            "instance/id": instance_id,
            "instance/name": name,
            "instance/hostname": f"{name}.{self.zone}.c.{PROJECT}.internal",
            "instance/zone": f"projects/123456789012/zones/{self.zone}",
            f"{ATTRIBUTES}/accelerator-type": self.accelerator_type,
            f"{ATTRIBUTES}/worker-id": str(self.worker),
            f"{ATTRIBUTES}/agent-worker-number": str(self.worker),
            f"{ATTRIBUTES}/worker-network-endpoints": endpoints,
            f"{ATTRIBUTES}/tpu-env": "".join(f"{k}: '{v}'\n" for k, v in sorted(env.items())),
        }


_INTS = {"worker", "hosts", "slice_id", "num_slices"}
FIELDS = tuple(f.name for f in fields(TpuIdentity))


def identity_from_fields(given: Mapping[str, object], base: TpuIdentity | None = None) -> TpuIdentity:
    """`base` (the defaults) with the given fields replaced; ValueError naming an unknown field or value."""
    unknown = set(given) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown identity field(s) {sorted(unknown)}; known: {', '.join(FIELDS)}")
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
    return replace(base or TpuIdentity(), **changes)  # type: ignore[arg-type]


def parse_identity(text: str) -> TpuIdentity:
    """`--identity node=my-slice,worker=3,hosts=4,accelerator_type=v5litepod-16,slice_id=1,num_slices=2`."""
    pairs = [part.partition("=") for part in text.split(",") if part.strip()]
    bad = [name for name, eq, _ in pairs if not eq or not name.strip()]
    if bad or not pairs:
        raise ValueError(f"--identity {text!r}: expected FIELD=VALUE,... with fields {', '.join(FIELDS)}")
    return identity_from_fields({name.strip(): value.strip() for name, _, value in pairs})
