"""host/workload.py: the workload of a process read from its /proc entry and the node's kubelet files.

A real process moved into a real cgroup laid out as the kubelet lays out a pod (tests/support/kubepods.py),
seen by the real scanner; fixture trees (a /proc/PID and a kubelet directory) for what cannot run here: a
pod's service account mount, its environment, the kubelet's own files.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.kubepods import KubepodsCgroup
from tests.support.proctree import ProcTree
from tests.support.waiting import wait_for
from tests.support.workloads import HOLD_FLAGS, UniqueDevice
from watchdog.core.workload import NO_WORKLOAD, Runtime, Workload, WorkloadKind
from watchdog.host.holders import HolderScanner
from watchdog.host.workload import KUBELET_PODS, POD_LOGS, SERVICE_ACCOUNT_NAMESPACE, WorkloadReader, in_root

UID = "8d3f5c2a-1b4e-4c6d-9e8f-0a1b2c3d4e5f"
REPO = Path(__file__).resolve().parents[2]
ID = "4f1c2e6a8b9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091"
POD_CGROUP = (
    f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/"
    f"cri-containerd-{ID}.scope\n"
)
HOLD = "import os, sys; fd = os.open(sys.argv[1], int(sys.argv[2])); print('ready', flush=True); input()"


def pod_process(tree: ProcTree, pid: int, *, environ: bytes = b"", namespace: str | None = None) -> Path:
    """A container's process in the fixture tree: its cgroup, environment and service account mount."""
    pid_dir = tree.add(pid, cgroup=POD_CGROUP)
    (pid_dir / "environ").write_bytes(environ)
    if namespace is not None:
        account = pid_dir / "root" / SERVICE_ACCOUNT_NAMESPACE
        account.parent.mkdir(parents=True)
        account.write_text(namespace)
    return pid_dir


def test_namespace_from_the_service_account_and_name_from_hostname(tmp_path: Path) -> None:
    tree = ProcTree(tmp_path / "proc")
    pod_process(tree, 100, environ=b"PATH=/bin\0HOSTNAME=trainer-0\0", namespace="ml\n")
    found = WorkloadReader(str(tree.root), str(tmp_path / "node")).read(100)
    assert (found.pod_uid, found.pod_namespace, found.pod_name) == (UID, "ml", "trainer-0")
    assert (found.runtime, found.container_id, found.container_name) == (Runtime.CONTAINERD, ID, None)


def test_kubelet_files_name_the_pod_and_its_container(tmp_path: Path) -> None:
    """The pod log directory names namespace and pod exactly (a pod that sets its own hostname has a HOSTNAME
    that is not its name); the container's name is its one entry in the kubelet's pod directory."""
    tree = ProcTree(tmp_path / "proc")
    pod_process(tree, 100, environ=b"HOSTNAME=custom-host\0", namespace="ml")
    node = tmp_path / "node"
    (node / POD_LOGS / f"ml_trainer-0_{UID}").mkdir(parents=True)
    (node / POD_LOGS / f"ml_other_{ID[:8]}-0000-0000-0000-000000000000").mkdir()
    (node / KUBELET_PODS / UID / "containers" / "jax").mkdir(parents=True)
    found = WorkloadReader(str(tree.root), str(node)).read(100)
    assert found == Workload(
        f"cri-containerd-{ID}.scope", f"kubepods-burstable-pod{UID.replace('-', '_')}.slice",
        Runtime.CONTAINERD, ID, UID, "ml", "trainer-0", "jax",
    )  # fmt: skip
    (node / KUBELET_PODS / UID / "containers" / "sidecar").mkdir()  # two: which one is not known
    assert WorkloadReader(str(tree.root), str(node)).read(100).container_name is None


def test_the_node_s_files_are_found_through_pid_1_s_root_by_default(tmp_path: Path) -> None:
    """A daemon in a container with the host's PID namespace sees the node's own filesystem as PID 1's root
    (/proc/1/root), with nothing mounted: there is where the kubelet's files are looked for first."""
    tree = ProcTree(tmp_path / "proc")
    pod_process(tree, 100)
    node = tree.add(1, "systemd", ppid=0) / "root"
    (node / POD_LOGS / f"ml_trainer-0_{UID}").mkdir(parents=True)
    (node / KUBELET_PODS / UID / "containers" / "jax").mkdir(parents=True)
    found = WorkloadReader(str(tree.root)).read(100)
    assert (found.pod_namespace, found.pod_name, found.container_name) == ("ml", "trainer-0", "jax")


def test_etc_hosts_when_the_environment_says_nothing_and_mountinfo_for_the_container(tmp_path: Path) -> None:
    tree = ProcTree(tmp_path / "proc")
    pid_dir = pod_process(tree, 100)
    (pid_dir / "mountinfo").write_text(
        f"3 1 8:1 /var/lib/kubelet/pods/{UID}/containers/jax/5c1f2e3d /dev/termination-log rw - ext4 sda1\n"
    )
    node = tmp_path / "node"
    hosts = node / KUBELET_PODS / UID / "etc-hosts"
    hosts.parent.mkdir(parents=True)
    hosts.write_text("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n10.8.0.12\ttrainer-0\n")
    (node / KUBELET_PODS / UID / "containers" / "jax").mkdir(parents=True)
    (node / KUBELET_PODS / UID / "containers" / "init").mkdir()
    found = WorkloadReader(str(tree.root), str(node)).read(100)
    assert (found.pod_namespace, found.pod_name, found.container_name) == (None, "trainer-0", "jax")
    assert found.describe() == "pod ?/trainer-0 container jax"


def test_symlinks_in_the_container_are_followed_inside_it(tmp_path: Path) -> None:
    """Most images have /var/run -> /run (absolute): the kernel would follow it from the reader's root and
    read the host's /run. It is followed inside the container's root; a link pointing out of it
    (/var/run/secrets -> /../../../../etc) never leaves it either."""
    tree = ProcTree(tmp_path / "proc")
    root = pod_process(tree, 100) / "root"
    (root / "var").mkdir(parents=True)
    (root / "var" / "run").symlink_to("/run")
    account = root / "run" / "secrets" / "kubernetes.io" / "serviceaccount"
    account.mkdir(parents=True)
    (account / "namespace").write_text("ml")
    assert WorkloadReader(str(tree.root), str(tmp_path / "node")).read(100).pod_namespace == "ml"
    assert in_root(str(root), SERVICE_ACCOUNT_NAMESPACE) == str(account / "namespace")
    escape = pod_process(tree, 101) / "root"
    (escape / "var" / "run").mkdir(parents=True)
    outside = tmp_path / "secrets" / "kubernetes.io" / "serviceaccount"
    outside.mkdir(parents=True)
    (outside / "namespace").write_text("kube-system")  # what an escape would read
    (escape / "var" / "run" / "secrets").symlink_to(f"{'/..' * 12}{tmp_path}/secrets")
    assert WorkloadReader(str(tree.root), str(tmp_path / "node")).read(101).pod_namespace is None
    (escape / "loop").symlink_to("/loop")
    assert in_root(str(escape), "loop/namespace") is None  # too many links, like the kernel's ELOOP


def test_a_fifo_or_bad_name_in_the_container_is_never_waited_on_nor_shown(tmp_path: Path) -> None:
    tree = ProcTree(tmp_path / "proc")
    pid_dir = pod_process(tree, 100, environ=b"HOSTNAME=Not_A_Name\0")
    account = pid_dir / "root" / SERVICE_ACCOUNT_NAMESPACE
    account.parent.mkdir(parents=True)
    os.mkfifo(account)  # opening it for reading would block until a writer came
    found = WorkloadReader(str(tree.root), str(tmp_path / "node")).read(100)
    assert (found.pod_uid, found.pod_namespace, found.pod_name) == (UID, None, None)


def test_a_process_outside_any_pod_reads_no_kubelet_file(tmp_path: Path) -> None:
    tree = ProcTree(tmp_path / "proc")
    tree.add(100, cgroup="0::/system.slice/train.service\n")
    tree.add(101, omit=("cgroup",))
    reader = WorkloadReader(str(tree.root), str(tmp_path / "missing"))
    assert reader.read(100) == Workload("train.service", "system.slice")
    assert reader.read(101) == NO_WORKLOAD
    assert reader.read(999) == NO_WORKLOAD  # no such process


def test_the_scan_of_a_fixture_tree_carries_each_holder_s_workload(tmp_path: Path) -> None:
    device = tmp_path / "accel0"
    device.write_text("")
    tree = ProcTree(tmp_path / "proc")
    tree.add(100, cgroup=POD_CGROUP, fds={3: str(device)})
    tree.add(101, cgroup="0::/system.slice/train.service\n", fds={3: str(device)})
    scanner = HolderScanner(patterns=[str(device)], proc_root=str(tree.root), node_root=str(tmp_path))
    found = {h.pid: h.workload for h in scanner.scan().holders}
    assert (found[100].kind, found[100].pod_uid, found[101].unit) == (WorkloadKind.POD, UID, "train.service")


# ---------------------------------------------------------------- a real process in a real pod cgroup


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], UniqueDevice]]:
    with (
        UniqueDevice(tmp_path) as device,
        subprocess.Popen(
            [sys.executable, "-c", HOLD, str(device.path), str(HOLD_FLAGS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        ) as proc,
    ):
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline() == "ready\n"
            yield proc, device
        finally:
            proc.kill()


def test_a_real_process_in_a_kubelet_cgroup_is_seen_as_its_pod(
    tmp_path: Path, holder: tuple[subprocess.Popen[str], UniqueDevice]
) -> None:
    proc, device = holder
    node = tmp_path / "node"
    with KubepodsCgroup() as cgroup:
        (node / POD_LOGS / f"ml_trainer-0_{cgroup.pod_uid}").mkdir(parents=True)
        (node / KUBELET_PODS / cgroup.pod_uid / "containers" / "jax").mkdir(parents=True)
        cgroup.enter(proc.pid)
        assert f"0::{cgroup.path}" in Path(f"/proc/{proc.pid}/cgroup").read_text().splitlines()
        scanner = HolderScanner(patterns=[str(device.path)], node_root=str(node))
        found = wait_for(
            lambda: next((h for h in scanner.scan().holders if h.pid == proc.pid), None),
            timeout=30, what="the scan to find the holder",
        )  # fmt: skip
        assert found.workload.to_dict() == {
            "kind": "pod", "unit": f"cri-containerd-{cgroup.container_id}.scope",
            "slice": f"kubepods-burstable-pod{cgroup.pod_uid.replace('-', '_')}.slice",
            "runtime": "containerd", "container_id": cgroup.container_id, "pod_uid": cgroup.pod_uid,
            "pod_namespace": "ml", "pod_name": "trainer-0", "container_name": "jax",
        }  # fmt: skip
        proc.kill()
        proc.wait(timeout=20)


READER = "import json, sys; from watchdog.host.workload import WorkloadReader; "
READER += "pid = int(sys.argv[1]); raw = open(f'/proc/{pid}/cgroup').read(); "
READER += "print(json.dumps([raw, WorkloadReader().read(pid).to_dict()]))"


def test_a_reader_in_a_cgroup_namespace_of_its_own_still_sees_the_pod(
    holder: tuple[subprocess.Popen[str], UniqueDevice],
) -> None:
    """A daemon in a container with a private cgroup namespace reads other cgroups' paths relative to its own
    (`0::/../kubepods.slice/...`): the pod, the container and the unit are still told."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    proc, _ = holder
    with KubepodsCgroup() as cgroup:
        cgroup.enter(proc.pid)
        own = cgroup.top / "daemon"
        own.mkdir()
        try:
            join = f'echo $$ > "{own}/cgroup.procs"; exec unshare --cgroup "$@"'
            done = subprocess.run(
                ["/bin/sh", "-c", join, "sh", sys.executable, "-c", READER, str(proc.pid)],
                capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
            )  # fmt: skip
        finally:
            own.rmdir()
        proc.kill()
        proc.wait(timeout=20)
    assert done.returncode == 0, done.stderr
    raw, seen = json.loads(done.stdout)
    assert "\n0::/../kubepods.slice/kubepods-burstable.slice/" in f"\n{raw}"  # relative to the reader's own
    assert (seen["kind"], seen["pod_uid"], seen["container_id"]) == (
        "pod",
        cgroup.pod_uid,
        cgroup.container_id,
    )
    assert (seen["runtime"], seen["unit"]) == ("containerd", f"cri-containerd-{cgroup.container_id}.scope")
