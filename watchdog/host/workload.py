"""Reading which workload a holder belongs to: its cgroup, and for a Kubernetes pod the files that name it.

As root on the node, without the API server (docs/holder-identity.md): the pod's uid is in the cgroup path;
its namespace and name in the kubelet's pod log directory (`/var/log/pods/<namespace>_<name>_<uid>`), else the
namespace in the container's service account mount and the name as its hostname (HOSTNAME in its environment,
else the kubelet's etc-hosts); the container's name in the kubelet's bind mount of its termination log, else
the one entry of `/var/lib/kubelet/pods/<uid>/containers/`. The node's files are looked for as PID 1 sees
them (`/proc/1/root`: in a container with the host's PID namespace, the DaemonSet's, that is the node's own
filesystem, with nothing mounted), then as this process sees them. Both roots are injectable (a fixture tree).

A container's files are the container's to make: each is opened without following a FIFO into a hang
(O_NONBLOCK, regular files only) and read to a bound; what is missing or odd is None, never an error. A path
under another process's root (`/proc/PID/root/var/run/...`) is resolved by hand (`in_root`): the kernel would
resolve an absolute symlink met on the way (`/var/run -> /run`, in most images) from OUR root, reading the
host's file instead of the container's.
"""

from __future__ import annotations

import os
import stat
from dataclasses import replace

from watchdog.core.workload import (
    NO_WORKLOAD,
    Workload,
    container_of_mountinfo,
    dns_name,
    hostname_of_environ,
    hostname_of_etc_hosts,
    pod_of_log_dir,
    workload_of_cgroup,
)

SERVICE_ACCOUNT_NAMESPACE = "var/run/secrets/kubernetes.io/serviceaccount/namespace"  # in the container
KUBELET_PODS = "var/lib/kubelet/pods"
POD_LOGS = "var/log/pods"
_LIMIT = 1 << 20  # an environment or a mountinfo beyond this is cut; a name is in the first few KiB


def read_bounded(path: str, limit: int = _LIMIT) -> bytes | None:
    """The first `limit` bytes of the regular file at `path`, or None (missing, unreadable, not a regular
    file: a FIFO a container left there is never waited on)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, left = [], limit
        while left > 0:
            chunk = os.read(fd, min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


_MAX_LINKS = 40  # as the kernel's own limit on symlinks in one lookup


def in_root(root: str, path: str) -> str | None:
    """`path` as a process whose root directory is `root` sees it: each symlink on the way followed inside
    `root` (an absolute one from `root` itself, `..` never above it); None when a part is missing or there
    are too many links. The answer names no symlink but its own parts may change meanwhile: what is read
    through it is only ever shown."""
    done: list[str] = []
    todo = [part for part in path.split("/") if part]
    links = 0
    while todo:
        part = todo.pop(0)
        if part == ".":
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        here = "/".join([root, *done, part])
        try:
            if not stat.S_ISLNK(os.lstat(here).st_mode):
                done.append(part)
                continue
            target = os.readlink(here)
        except OSError:
            return None
        links += 1
        if links > _MAX_LINKS:
            return None
        if target.startswith("/"):
            done = []
        todo = [part for part in target.split("/") if part] + todo
    return "/".join([root, *done]) or "/"


def _text(path: str, limit: int = _LIMIT) -> str | None:
    raw = read_bounded(path, limit)
    return None if raw is None else raw.decode("utf-8", errors="replace")


class WorkloadReader:
    """Tells the workload of a process from `proc_root` and the node's files under `node_root` (None: as
    PID 1 of `proc_root` sees them, then under /)."""

    def __init__(self, proc_root: str = "/proc", node_root: str | None = None) -> None:
        self.proc_root = proc_root.rstrip("/") or "/"
        roots = (node_root,) if node_root is not None else (f"{self.proc_root}/1/root", "/")
        self.node_roots = tuple(root.rstrip("/") for root in roots)

    def read(self, pid: int, cgroup_text: str | None = None) -> Workload:
        """The workload of `pid`; `cgroup_text` when the caller has read /proc/PID/cgroup already."""
        if cgroup_text is None:
            cgroup_text = _text(f"{self.proc_root}/{pid}/cgroup")
            if cgroup_text is None:
                return NO_WORKLOAD
        found = workload_of_cgroup(cgroup_text)
        if found.pod_uid is None:
            return found
        return self._pod(pid, found, found.pod_uid)

    def _pod(self, pid: int, found: Workload, uid: str) -> Workload:
        namespace, name = self._from_log_dir(uid) or (None, None)
        account = in_root(f"{self.proc_root}/{pid}/root", SERVICE_ACCOUNT_NAMESPACE)
        if namespace is None and account is not None:
            namespace = dns_name(_text(account, 4096))
        if name is None:
            environ = read_bounded(f"{self.proc_root}/{pid}/environ")
            name = None if environ is None else hostname_of_environ(environ)
        found_dirs = (in_root(root, f"{KUBELET_PODS}/{uid}") for root in self.node_roots)
        pod_dir = next((path for path in found_dirs if path is not None and os.path.isdir(path)), None)
        if name is None and pod_dir is not None:
            hosts = _text(f"{pod_dir}/etc-hosts", 65536)
            name = None if hosts is None else hostname_of_etc_hosts(hosts)
        mountinfo = _text(f"{self.proc_root}/{pid}/mountinfo")
        container = None if mountinfo is None else container_of_mountinfo(mountinfo, uid)
        if container is None and pod_dir is not None:
            try:
                entries = os.listdir(f"{pod_dir}/containers")
            except OSError:
                entries = []
            container = dns_name(entries[0]) if len(entries) == 1 else None
        return replace(found, pod_namespace=namespace, pod_name=name, container_name=container)

    def _from_log_dir(self, uid: str) -> tuple[str, str] | None:
        for root in self.node_roots:
            logs = in_root(root, POD_LOGS)
            try:
                names = os.listdir(logs) if logs is not None else []
            except OSError:
                continue
            for entry in names:
                if entry.endswith(uid):
                    pod = pod_of_log_dir(entry, uid)
                    if pod is not None:
                        return pod
        return None
