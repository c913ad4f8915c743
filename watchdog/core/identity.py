"""Which TPU host this is: the instance, its slice (the TPU node), its place in it, and its Multislice job.

Read once at start from the metadata server (metadata/identity.py fetches, this parses): the instance's id,
name, zone and machine type; `instance/attributes/accelerator-type`, `agent-worker-number` (this host's
index in its slice, what JAX reads), `worker-id`, `worker-network-endpoints` (the slice's hosts) and
`tpu-env` (lines `KEY: 'value'`: NODE_ID names the TPU node, WORKER_ID, and on Multislice MEGASCALE_SLICE_ID,
MEGASCALE_NUM_SLICES, MEGASCALE_COORDINATOR_ADDRESS). Every value is optional and checked: a bad one is
left empty and named in the problems (said once by the caller), never fatal. The result labels one metric
series per host, so each value is short and printable. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass

INSTANCE_ID = "instance/id"
INSTANCE_NAME = "instance/name"
ZONE = "instance/zone"
MACHINE_TYPE = "instance/machine-type"  # projects/NUM/machineTypes/a3-highgpu-8g
ACCELERATOR_TYPE = "instance/attributes/accelerator-type"
AGENT_WORKER_NUMBER = "instance/attributes/agent-worker-number"
WORKER_ID = "instance/attributes/worker-id"
WORKER_ENDPOINTS = "instance/attributes/worker-network-endpoints"
TPU_ENV = "instance/attributes/tpu-env"
IDENTITY_PATHS = (
    INSTANCE_ID, INSTANCE_NAME, ZONE, MACHINE_TYPE, ACCELERATOR_TYPE, AGENT_WORKER_NUMBER, WORKER_ID,
    WORKER_ENDPOINTS, TPU_ENV,
)  # fmt: skip

MAX_VALUE = 128  # a label value: longer is not an identity but something else
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")  # ids, names, zones, accelerator types, host:port
_NUMBER = re.compile(r"^[0-9]{1,6}$")
_NUMBER_ID = re.compile(r"^[0-9]{1,20}$")  # instance ids are 64-bit numbers
_ENV_LINE = re.compile(r"""^([A-Z][A-Z0-9_]*):\s*(?:'([^']*)'|"([^"]*)"|([^'"\s][^\s]*)|)\s*$""")
_ENDPOINT_LINE = re.compile(r"^[A-Za-z0-9._:-]+$")
MAX_ENDPOINTS = 4096  # the largest slices have hundreds of hosts


@dataclass(frozen=True)
class HostIdentity:
    """This host as a fleet view needs it; "" where unknown (not a TPU VM, a key missing or bad)."""

    instance_id: str = ""
    instance_name: str = ""
    zone: str = ""
    machine_type: str = ""  # the last part of instance/machine-type: a3-highgpu-8g, ct5lp-hightpu-4t
    accelerator_type: str = ""
    worker_id: str = ""  # this host's index in its slice (agent-worker-number, else worker-id, else tpu-env)
    tpu_node: str = ""  # the TPU node: the slice, by its name (tpu-env NODE_ID)
    slice_hosts: int = 0  # hosts in the slice (worker-network-endpoints); 0: unknown
    slice_id: str = ""  # Multislice: this slice's index in the job (MEGASCALE_SLICE_ID)
    num_slices: str = ""  # Multislice: slices in the job (MEGASCALE_NUM_SLICES)
    multislice_coordinator: str = ""  # Multislice: the job's coordinator (one per job, all slices)

    def labels(self) -> dict[str, str]:
        """The `tpu_watchdog_host_info` labels: every field, as text (one series per host)."""
        return {k: (str(v) if v else "") for k, v in asdict(self).items()}

    def to_dict(self) -> dict[str, object]:
        """/status `host`, history and webhooks: the fields, unknown ones left out."""
        return {k: v for k, v in asdict(self).items() if v}


LABELS = tuple(HostIdentity().labels())

# The `host` object of a webhook body and of a history entry, and the identity label each field comes
# from: the instance, and its slice (the TPU node) and Multislice job where it has them.
HOST_FIELDS = {
    "instance_id": "instance_id",
    "name": "instance_name",
    "zone": "zone",
    "accelerator_type": "accelerator_type",
    "worker": "worker_id",
    "tpu_node": "tpu_node",
    "slice_hosts": "slice_hosts",
    "slice_id": "slice_id",
    "num_slices": "num_slices",
    "multislice_coordinator": "multislice_coordinator",
}


def host_fields(labels: Mapping[str, str], known_only: bool = False) -> dict[str, str]:
    """The `host` object webhooks and the history name this host by, from the identity's labels
    (`HostIdentity.labels()`): every field, "" where unknown, or (`known_only`) the known ones."""
    fields = {name: labels.get(fact, "") for name, fact in HOST_FIELDS.items()}
    return {name: value for name, value in fields.items() if value or not known_only}


def host_labels(fields: Mapping[str, str]) -> dict[str, str]:
    """The inverse of `host_fields`: the labels of a `host` object (what an opening history entry kept)."""
    return {label: fields.get(name, "") for name, label in HOST_FIELDS.items()}


def parse_tpu_env(text: str) -> tuple[dict[str, str], int]:
    """The `KEY: 'value'` lines of tpu-env (quotes optional), and how many lines were not such a line."""
    values: dict[str, str] = {}
    bad = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _ENV_LINE.match(line.strip())
        if match is None:
            bad += 1
            continue
        key, *quoted = match.groups()
        values[key] = next((v for v in quoted if v is not None), "")
    return values, bad


def parse_endpoints(text: str) -> int | None:
    """How many hosts worker-network-endpoints lists (comma-separated; each a plain address or a
    `name:id:ip` triple); None if it is not such a list."""
    entries = [entry.strip() for entry in text.strip().split(",")]
    if not text.strip() or len(entries) > MAX_ENDPOINTS or not all(map(_ENDPOINT_LINE.match, entries)):
        return None
    return len(entries)


def identity_from(raw: Mapping[str, str | None]) -> tuple[HostIdentity, list[str]]:
    """The identity from the answers so far (path -> body; None or absent: not there), and what was wrong
    with them, one sentence each, naming the key and what was kept."""
    problems: list[str] = []

    def checked(path: str, value: str | None, pattern: re.Pattern[str] = _NAME) -> str:
        if value is None:
            return ""
        value = value.strip()
        if not value:
            return ""
        if len(value) > MAX_VALUE or not pattern.match(value):
            problems.append(f"{path}: {value[:60]!r} is not a valid value: left empty")
            return ""
        return value

    env_text = raw.get(TPU_ENV)
    env: dict[str, str] = {}
    if env_text is not None:
        env, bad = parse_tpu_env(env_text)
        if bad:
            problems.append(f"{TPU_ENV}: {bad} line(s) not `KEY: 'value'`, ignored")
    zone = (raw.get(ZONE) or "").strip().rsplit("/", 1)[-1]
    workers = {
        source: checked(source, value, _NUMBER)
        for source, value in (
            (AGENT_WORKER_NUMBER, raw.get(AGENT_WORKER_NUMBER)),
            (WORKER_ID, raw.get(WORKER_ID)),
            (f"{TPU_ENV} WORKER_ID", env.get("WORKER_ID")),
        )
    }
    known = {w for w in workers.values() if w}
    if len(known) > 1:
        problems.append(f"the worker numbers disagree ({workers}): using {AGENT_WORKER_NUMBER}'s")
    endpoints = raw.get(WORKER_ENDPOINTS)
    hosts = parse_endpoints(endpoints) if endpoints is not None else 0
    if hosts is None:
        shown = (endpoints or "")[:60]
        problems.append(f"{WORKER_ENDPOINTS}: {shown!r} is not a comma-separated address list: ignored")
        hosts = 0
    identity = HostIdentity(
        instance_id=checked(INSTANCE_ID, raw.get(INSTANCE_ID), _NUMBER_ID),
        instance_name=checked(INSTANCE_NAME, raw.get(INSTANCE_NAME)),
        zone=checked(ZONE, zone),
        machine_type=checked(MACHINE_TYPE, (raw.get(MACHINE_TYPE) or "").strip().rsplit("/", 1)[-1]),
        accelerator_type=checked(ACCELERATOR_TYPE, raw.get(ACCELERATOR_TYPE) or env.get("ACCELERATOR_TYPE")),
        worker_id=next((w for w in workers.values() if w), ""),
        tpu_node=checked(f"{TPU_ENV} NODE_ID", env.get("NODE_ID")),
        slice_hosts=hosts,
        slice_id=checked(f"{TPU_ENV} MEGASCALE_SLICE_ID", env.get("MEGASCALE_SLICE_ID"), _NUMBER),
        num_slices=checked(f"{TPU_ENV} MEGASCALE_NUM_SLICES", env.get("MEGASCALE_NUM_SLICES"), _NUMBER),
        multislice_coordinator=checked(
            f"{TPU_ENV} MEGASCALE_COORDINATOR_ADDRESS", env.get("MEGASCALE_COORDINATOR_ADDRESS")
        ),
    )
    return identity, problems
