"""core/workload.py: what a cgroup path and the kubelet's files say about whose process it is, for each
runtime and driver (fixture lines as each writes them; the real cgroups: tests/host/test_workload.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from watchdog.core.workload import (
    NO_WORKLOAD,
    Runtime,
    Workload,
    WorkloadKind,
    container_of_mountinfo,
    hostname_of_environ,
    hostname_of_etc_hosts,
    pod_of_log_dir,
    workload_of_cgroup,
)

ID = "4f1c2e6a8b9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091"
UID = "8d3f5c2a-1b4e-4c6d-9e8f-0a1b2c3d4e5f"
STATIC_UID = "0123456789abcdef0123456789abcdef"  # a static pod's: a hash, no dashes
POD_SLICE = f"kubepods-burstable-pod{UID.replace('-', '_')}.slice"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(  # GKE, containerd, systemd cgroup driver, cgroup v2
            f"0::/kubepods.slice/kubepods-burstable.slice/{POD_SLICE}/cri-containerd-{ID}.scope\n",
            Workload(f"cri-containerd-{ID}.scope", POD_SLICE, Runtime.CONTAINERD, ID, UID),
            id="containerd-systemd-v2",
        ),
        pytest.param(  # a guaranteed pod sits directly under kubepods.slice
            f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/cri-containerd-{ID}.scope\n",
            Workload(
                f"cri-containerd-{ID}.scope",
                f"kubepods-pod{UID.replace('-', '_')}.slice",
                Runtime.CONTAINERD,
                ID,
                UID,
            ),
            id="guaranteed",
        ),
        pytest.param(  # CRI-O, best effort
            f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID.replace('-', '_')}"
            f".slice/crio-{ID}.scope\n",
            Workload(
                f"crio-{ID}.scope",
                f"kubepods-besteffort-pod{UID.replace('-', '_')}.slice",
                Runtime.CRIO,
                ID,
                UID,
            ),
            id="crio-besteffort",
        ),
        pytest.param(  # cgroupfs driver, cgroup v1: the runtime is not in the path
            f"12:memory:/kubepods/burstable/pod{UID}/{ID}\n11:pids:/kubepods/burstable/pod{UID}/{ID}\n"
            f"1:name=systemd:/kubepods/burstable/pod{UID}/{ID}\n",
            Workload(container_id=ID, pod_uid=UID),
            id="cgroupfs-v1",
        ),
        pytest.param(  # a static pod (a mirror pod's uid is a hash)
            f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{STATIC_UID}.slice/"
            f"cri-containerd-{ID}.scope\n",
            Workload(
                f"cri-containerd-{ID}.scope",
                f"kubepods-burstable-pod{STATIC_UID}.slice",
                Runtime.CONTAINERD,
                ID,
                STATIC_UID,
            ),
            id="static-pod",
        ),
        pytest.param(  # docker, systemd driver
            f"0::/system.slice/docker-{ID}.scope\n",
            Workload(f"docker-{ID}.scope", "system.slice", Runtime.DOCKER, ID),
            id="docker-systemd",
        ),
        pytest.param(  # docker, cgroupfs driver, hybrid: v2 empty, the id in v1's lines
            f"9:name=systemd:/docker/{ID}\n4:memory:/docker/{ID}\n0::/\n",
            Workload(runtime=Runtime.DOCKER, container_id=ID),
            id="docker-cgroupfs",
        ),
        pytest.param(  # podman, rootful; its payload in a sub-cgroup
            f"0::/machine.slice/libpod-{ID}.scope/container\n",
            Workload(f"libpod-{ID}.scope", "machine.slice", Runtime.PODMAN, ID),
            id="podman",
        ),
        pytest.param(  # podman, rootless, under the user's manager
            f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope\n",
            Workload(f"libpod-{ID}.scope", "user.slice", Runtime.PODMAN, ID),
            id="podman-rootless",
        ),
        pytest.param(  # conmon is the runtime's monitor, not the container
            f"0::/machine.slice/libpod-conmon-{ID}.scope\n",
            Workload(f"libpod-conmon-{ID}.scope", "machine.slice"),
            id="conmon",
        ),
        pytest.param(
            "0::/system.slice/train.service\n", Workload("train.service", "system.slice"), id="service"
        ),
        pytest.param(  # a service that delegates and runs its payload in a sub-cgroup
            "0::/system.slice/train.service/payload\n",
            Workload("train.service", "system.slice"),
            id="delegated",
        ),
        pytest.param(  # systemd-run --scope; v1 hybrid with systemd's path in name=systemd only
            "9:name=systemd:/system.slice/run-r1234.scope\n4:memory:/process_api/abc\n0::/\n",
            Workload("run-r1234.scope", "system.slice"),
            id="scope-hybrid",
        ),
        pytest.param(
            "0::/user.slice/user-0.slice/session-3.scope\n",
            Workload("session-3.scope", "user-0.slice"),
            id="session",
        ),
        pytest.param("0::/\n", NO_WORKLOAD, id="root"),  # the root cgroup, or a cgroup namespace's view
        pytest.param("", NO_WORKLOAD, id="empty"),
    ],
)
def test_cgroup_tells_unit_slice_runtime_container_and_pod(text: str, expected: Workload) -> None:
    assert workload_of_cgroup(text) == expected


@pytest.mark.parametrize(
    ("workload", "kind", "words"),
    [
        (Workload(pod_uid=UID, pod_namespace="ml", pod_name="trainer-0", container_name="jax"), "pod",
         "pod ml/trainer-0 container jax"),
        (Workload(pod_uid=UID, pod_name="trainer-0"), "pod", "pod ?/trainer-0"),
        (Workload(pod_uid=UID), "pod", f"pod uid {UID}"),
        (Workload(runtime=Runtime.DOCKER, container_id=ID), "container", f"container docker {ID[:12]}"),
        (Workload(container_id=ID), "container", f"container {ID[:12]}"),
        (Workload("train.service", "system.slice"), "systemd_unit", "unit train.service"),
        (NO_WORKLOAD, "none", ""),
    ],
)  # fmt: skip
def test_kind_and_words(workload: Workload, kind: str, words: str) -> None:
    assert workload.kind is WorkloadKind(kind)
    assert workload.describe() == words


def test_to_dict_names_every_field_and_reads_back() -> None:
    workload = Workload(
        f"cri-containerd-{ID}.scope", POD_SLICE, Runtime.CONTAINERD, ID, UID, "ml", "trainer-0", "jax"
    )
    data = workload.to_dict()
    assert data == {
        "kind": "pod", "unit": f"cri-containerd-{ID}.scope", "slice": POD_SLICE, "runtime": "containerd",
        "container_id": ID, "pod_uid": UID, "pod_namespace": "ml", "pod_name": "trainer-0",
        "container_name": "jax",
    }  # fmt: skip
    assert Workload.from_dict(data) == workload
    assert Workload.from_dict(NO_WORKLOAD.to_dict()) == NO_WORKLOAD


@pytest.mark.parametrize("data", [None, [], "pod", {"runtime": "rkt", "unit": 3}])
def test_from_dict_of_anything_else_is_none_or_what_is_known(data: object) -> None:
    found = Workload.from_dict(data)
    assert found is None or found == NO_WORKLOAD


def test_hostname_from_environ() -> None:
    assert hostname_of_environ(b"PATH=/bin\0HOSTNAME=trainer-0\0HOME=/root\0") == "trainer-0"
    assert hostname_of_environ(b"PATH=/bin\0") is None
    assert hostname_of_environ(b"HOSTNAME=../../etc\0") is None  # not a name Kubernetes allows


KUBELET_HOSTS = (
    "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
    "fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n"
    "10.8.0.12\ttrainer-0.workers.ml.svc.cluster.local\ttrainer-0\n"
)


def test_hostname_from_the_kubelet_s_etc_hosts() -> None:
    assert hostname_of_etc_hosts(KUBELET_HOSTS) == "trainer-0"
    aliases = KUBELET_HOSTS + "\n# Entries added by HostAliases.\n10.0.0.9\tregistry\n"
    assert hostname_of_etc_hosts(aliases) == "trainer-0"  # an alias is not the pod's name
    # A hostNetwork pod gets a copy of the node's own /etc/hosts: its names are the node's.
    assert (
        hostname_of_etc_hosts("127.0.0.1\tlocalhost\n10.128.0.5\tt1v-n-1234.c.p.internal t1v-n-1234\n")
        is None
    )


def test_pod_from_its_log_directory_name() -> None:
    assert pod_of_log_dir(f"ml_trainer-0_{UID}", UID) == ("ml", "trainer-0")
    assert pod_of_log_dir(f"ml_trainer-0_{STATIC_UID}", UID) is None  # another pod's
    assert pod_of_log_dir(f"ml_Trainer_0_{UID}", UID) is None


def test_container_from_the_termination_log_mount() -> None:
    mountinfo = (
        "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
        f"2 1 8:1 /var/lib/kubelet/pods/{UID}/etc-hosts /etc/hosts rw - ext4 /dev/sda1 rw\n"
        f"3 1 8:1 /var/lib/kubelet/pods/{UID}/containers/jax/5c1f2e3d /dev/termination-log rw - ext4 sda1\n"
    )
    assert container_of_mountinfo(mountinfo, UID) == "jax"
    assert container_of_mountinfo(mountinfo, STATIC_UID) is None
    assert container_of_mountinfo("garbage\n", UID) is None


@given(st.text())
def test_any_cgroup_text_is_a_workload(text: str) -> None:
    found = workload_of_cgroup(text)
    assert isinstance(found.kind, WorkloadKind)
    assert found.describe() == found.describe().strip()


@given(st.binary(), st.text())
def test_any_file_contents_give_a_name_or_none(raw: bytes, text: str) -> None:
    for name in (hostname_of_environ(raw), hostname_of_etc_hosts(text), container_of_mountinfo(text, UID)):
        assert name is None or ("/" not in name and "_" not in name)
