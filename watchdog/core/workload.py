"""Which workload a process belongs to: its systemd unit and slice, its container, its Kubernetes pod.

"pid 4711 python3" tells an SRE nothing; the unit, container or pod that loses its progress is what they page
on. Most of it is in the cgroup path (`/proc/PID/cgroup`), parsed here; the pod's namespace and name and the
container's name come from files only the host can read (`watchdog/host/workload.py`), whose contents are
parsed here too. Pure: text in, a `Workload` out, never an exception. docs/holder-identity.md says where each
field comes from and when it cannot be known.
"""

from __future__ import annotations

import enum
import re
from dataclasses import asdict, dataclass, replace


class WorkloadKind(str, enum.Enum):
    """The most specific thing a process is known to belong to (the `kind` label of
    `tpu_watchdog_device_holders_by_kind`, `workload.kind` in JSON): a bounded set, never a name."""

    POD = "pod"  # a Kubernetes pod (its uid at least)
    CONTAINER = "container"  # a container outside Kubernetes (docker, podman, ...)
    SYSTEMD_UNIT = "systemd_unit"  # a systemd service or scope (a session, systemd-run --scope)
    NONE = "none"  # none of these could be told (the root cgroup, a cgroup namespace hiding the path)


class Runtime(str, enum.Enum):
    """The container runtime a container's cgroup names."""

    DOCKER = "docker"
    CONTAINERD = "containerd"  # cri-containerd-<id>.scope: containerd's CRI plugin (GKE, most kubelets)
    CRIO = "cri-o"
    PODMAN = "podman"


# A container's own cgroup under the systemd driver (<prefix>-<id>.scope) or the cgroupfs one (the id alone,
# or crio-<id>); conmon's scope (crio-conmon-, libpod-conmon-) is the runtime's monitor, not the container.
_SCOPE_RUNTIMES = {
    "docker": Runtime.DOCKER,
    "cri-containerd": Runtime.CONTAINERD,
    "crio": Runtime.CRIO,
    "libpod": Runtime.PODMAN,
}
_CONTAINER = re.compile(r"(?:(docker|cri-containerd|crio|libpod)-)?([0-9a-f]{64})(?:\.scope)?")
# kubepods-burstable-pod<uid with _ for ->.slice (systemd driver) or pod<uid> (cgroupfs). Static pods' uids
# are 32 hex digits without dashes.
_POD = re.compile(r"(?:kubepods(?:-besteffort|-burstable)?-)?pod([0-9a-f][0-9a-f_-]{30,35})(?:\.slice)?")
_UNIT_SUFFIXES = (".service", ".scope")
# DNS-1123: what Kubernetes allows in a namespace, a pod name and a container name (no "_", no "/").
_DNS_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?")
_ETC_HOSTS_HEAD = "# Kubernetes-managed hosts file"  # the kubelet's own; a hostNetwork pod's is the node's
_HOST_ALIASES = "# Entries added by HostAliases"
_NOT_A_HOSTNAME = frozenset({"localhost", "ip6-localhost", "ip6-loopback", "ip6-localnet", "ip6-mcastprefix",
                             "ip6-allnodes", "ip6-allrouters", "fe00::0"})  # fmt: skip


@dataclass(frozen=True)
class Workload:
    """What a process belongs to, as far as the host can tell; None where it cannot be known."""

    unit: str | None = None  # the last .service or .scope of its cgroup path (docker-<id>.scope is one too)
    slice: str | None = None  # the slice that unit sits in (system.slice, kubepods-burstable-pod<uid>.slice)
    runtime: Runtime | None = None
    container_id: str | None = None  # 64 hex digits
    pod_uid: str | None = None
    pod_namespace: str | None = None
    pod_name: str | None = None
    container_name: str | None = None

    @property
    def kind(self) -> WorkloadKind:
        if self.pod_uid is not None:
            return WorkloadKind.POD
        if self.container_id is not None:
            return WorkloadKind.CONTAINER
        if self.unit is not None:
            return WorkloadKind.SYSTEMD_UNIT
        return WorkloadKind.NONE

    def describe(self) -> str:
        """A few words naming it, for tables and log lines: `pod ns/name container trainer`, `container
        docker 0123456789ab`, `unit train.service`; "" when nothing is known."""
        kind = self.kind
        if kind is WorkloadKind.POD:
            pod = "/".join(part or "?" for part in (self.pod_namespace, self.pod_name))
            if self.pod_namespace is None and self.pod_name is None:
                pod = f"uid {self.pod_uid}"
            container = f" container {self.container_name}" if self.container_name else ""
            return f"pod {pod}{container}"
        if kind is WorkloadKind.CONTAINER:
            runtime = f"{self.runtime.value} " if self.runtime else ""
            return f"container {runtime}{(self.container_id or '')[:12]}"
        if kind is WorkloadKind.SYSTEMD_UNIT:
            return f"unit {self.unit}"
        return ""

    def to_dict(self) -> dict[str, str | None]:
        """Plain data for JSON (`holders --json`, /status, history, webhooks): every field, and the kind."""
        fields: dict[str, str | None] = {"kind": self.kind.value}
        for name, value in asdict(self).items():
            fields[name] = value.value if isinstance(value, Runtime) else value
        return fields

    @classmethod
    def from_dict(cls, data: object) -> Workload | None:
        """What `to_dict` wrote (the state file, a history entry), or None for anything else."""
        if not isinstance(data, dict):
            return None
        found: dict[str, str | None] = {}
        for name in cls.__dataclass_fields__:
            value = data.get(name)
            found[name] = value if isinstance(value, str) else None
        runtime = found.pop("runtime")
        known = {r.value: r for r in Runtime}
        return cls(runtime=known.get(runtime or ""), **found)


NO_WORKLOAD = Workload()


def words_of(data: object) -> str:
    """`Workload.describe()` of what `to_dict` wrote (/status, a history entry); "" for anything else."""
    return (Workload.from_dict(data) or NO_WORKLOAD).describe()


def workload_of_cgroup(text: str) -> Workload:
    """What /proc/PID/cgroup tells: lines `hierarchy-id:controllers:path` (cgroup v2: one `0::path`; v1: one a
    hierarchy, `name=systemd` carrying systemd's path). The unit and slice come from the v2 path, else
    systemd's; the container and the pod from the first path (v2, systemd's, then the others) that names
    them. Paths are as the reader's cgroup namespace shows them: a daemon in a private one sees "/"."""
    v2, systemd, others = None, None, []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        elif parts[1] == "name=systemd":
            systemd = parts[2]
        else:
            others.append(parts[2])
    unit_path = v2 if v2 not in (None, "/") else systemd
    unit, slice_ = _unit_and_slice(unit_path or "")
    found = Workload(unit=unit, slice=slice_)
    for path in [p for p in (v2, systemd) if p] + others:
        container = _container_of(path)
        if container.container_id is not None or container.pod_uid is not None:
            return replace(found, runtime=container.runtime, container_id=container.container_id,
                           pod_uid=container.pod_uid)  # fmt: skip
    return found


def _unit_and_slice(path: str) -> tuple[str | None, str | None]:
    components = [c for c in path.split("/") if c]
    units = [i for i, c in enumerate(components) if c.endswith(_UNIT_SUFFIXES)]
    end = units[-1] if units else len(components)
    slices = [c for c in components[:end] if c.endswith(".slice")]
    return (components[end] if units else None), (slices[-1] if slices else None)


def _container_of(path: str) -> Workload:
    components = [c for c in path.split("/") if c]
    pod_uid = None
    if any(c == "kubepods" or c.startswith(("kubepods.", "kubepods-")) for c in components):
        for c in components:
            match = _POD.fullmatch(c)
            if match:
                pod_uid = match.group(1).replace("_", "-")
    for parent, c in zip(["", *components], components, strict=False):
        match = _CONTAINER.fullmatch(c)
        if match is None:
            continue
        prefix, container_id = match.groups()
        if prefix is not None:
            runtime: Runtime | None = _SCOPE_RUNTIMES[prefix]
        else:
            runtime = Runtime.DOCKER if parent == "docker" else None  # cgroupfs: /docker/<id>
        return Workload(runtime=runtime, container_id=container_id, pod_uid=pod_uid)
    return Workload(pod_uid=pod_uid)


def dns_name(text: str | None) -> str | None:
    """`text` stripped if it is a name Kubernetes allows (a namespace, a pod or container name), else None:
    what a file says is shown only when it can be such a name."""
    if text is None:
        return None
    text = text.strip()
    return text if _DNS_NAME.fullmatch(text) else None


def hostname_of_environ(raw: bytes) -> str | None:
    """HOSTNAME from /proc/PID/environ (NUL-separated NAME=value), the pod's hostname in a pod's container."""
    for entry in raw.split(b"\0"):
        if entry.startswith(b"HOSTNAME="):
            return dns_name(entry[len(b"HOSTNAME=") :].decode("utf-8", errors="replace"))
    return None


def hostname_of_etc_hosts(text: str) -> str | None:
    """The pod's hostname from the kubelet's etc-hosts (`<pod IP>\\t[<fqdn>\\t]<hostname>`), None when the
    file is not the kubelet's own (a hostNetwork pod gets the node's /etc/hosts)."""
    if not text.startswith(_ETC_HOSTS_HEAD):
        return None
    found = None
    for line in text.splitlines():
        if line.startswith(_HOST_ALIASES):
            break
        names = line.split("#", 1)[0].split()[1:]
        if names and not _NOT_A_HOSTNAME.intersection(names):
            found = dns_name(names[-1])
    return found


def pod_of_log_dir(name: str, pod_uid: str) -> tuple[str, str] | None:
    """(namespace, pod name) from the kubelet's pod log directory name, `<namespace>_<pod name>_<uid>`
    (/var/log/pods/): neither name may hold "_", so the split is exact."""
    parts = name.split("_")
    if len(parts) != 3 or parts[2] != pod_uid:
        return None
    namespace, pod = dns_name(parts[0]), dns_name(parts[1])
    return None if namespace is None or pod is None else (namespace, pod)


def container_of_mountinfo(text: str, pod_uid: str) -> str | None:
    """The container's name from /proc/PID/mountinfo: the kubelet bind-mounts each container's termination
    log from `pods/<uid>/containers/<name>/<file>` (onto /dev/termination-log), and field 4 (the mount's
    root) keeps that path."""
    marker = f"/pods/{pod_uid}/containers/"
    for line in text.splitlines():
        fields = line.split(" ", 5)
        if len(fields) < 5:
            continue
        _, found, rest = fields[3].partition(marker)
        if found:
            name = dns_name(rest.split("/", 1)[0])
            if name is not None:
                return name
    return None
