"""`tpu-watchdog holders` end to end, as a subprocess: the table, --json, exit codes, a light start-up."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gpu import StandInGpuHost
from tests.support.kubepods import KubepodsCgroup
from tests.support.proctree import ProcTree

HOLD = "import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); print('ready', flush=True); sys.stdin.read()"
# A job that holds the node and forks a child that does not; both wait on the stdin they share.
JOB = """
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
child = os.fork()
if child == 0:
    os.close(fd)
    sys.stdin.read()
    os._exit(0)
print(child, flush=True)
sys.stdin.read()
os.waitpid(child, 0)
"""
COLUMNS = [
    *("COMMAND", "PID", "PPID", "USER", "STARTED", "CHILDREN", "SIGTERM", "FD-DEVICES", "WORKLOAD", "CGROUP"),
    "ARGS",
]
POD_UID = "8d3f5c2a-1b4e-4c6d-9e8f-0a1b2c3d4e5f"
CONTAINER_ID = "4f1c2e6a8b9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091"


# The nodes here carry /dev/random's numbers (class mem, which the rule refuses): every call names them.
ALLOW = ("--allow-number", "1:8")


def holders(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "watchdog", "holders", *ALLOW, *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={**os.environ, "TZ": "UTC"},
    )


@pytest.fixture
def node(tmp_path: Path) -> Path:
    path = tmp_path / "accel0"
    try:
        # /dev/random's driver: other tests on this machine hold nodes with /dev/full's.
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 8))
    except OSError as exc:
        pytest.skip(f"cannot mknod a device node here ({exc}); needs root on a filesystem without nodev")
    return path


@pytest.fixture
def holder(node: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(node)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"  # blocks until the child holds the node
    yield proc
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=30)
    proc.stdout.close()


def test_table_lists_the_holder_like_lsof(node: Path, holder: subprocess.Popen[str]) -> None:
    done = holders("--device", f"{node.parent}/accel*")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == COLUMNS
    rows = {int(line.split()[1]): re.split(r"  +", line) for line in lines[1:]}
    assert rows[holder.pid][2:4] == [str(os.getpid()), "root"]
    assert rows[holder.pid][5:8] == ["-", "default", str(node)]  # no children; no handler; the node
    assert rows[holder.pid][10] == f"{sys.executable} -c {' '.join(HOLD.split())} {node}"  # argv on one line


@pytest.fixture
def job(node: Path) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A job in its own session holding the node, and the pid of the child it forked."""
    proc = subprocess.Popen(
        [sys.executable, "-c", JOB, str(node)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    child = int(proc.stdout.readline())  # said once the job holds the node and has forked
    yield proc, child
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=30)
    proc.stdout.close()


def test_a_job_s_parent_children_user_and_start_time(
    node: Path, job: tuple[subprocess.Popen[str], int]
) -> None:
    proc, child = job
    done = holders("--device", f"{node.parent}/accel*", "--json")
    assert done.returncode == 0, done.stderr
    entry = {e["pid"]: e for e in json.loads(done.stdout)}[proc.pid]
    assert child not in {e["pid"] for e in json.loads(done.stdout)}  # it closed the node: not a holder
    assert (entry["ppid"], entry["children"], entry["user"]) == (os.getpid(), [child], "root")
    assert abs(entry["create_time"] - time.time()) < 60
    table = holders("--device", f"{node.parent}/accel*")
    row = {int(line.split()[1]): re.split(r"  +", line) for line in table.stdout.splitlines()[1:]}[proc.pid]
    started = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(entry["create_time"]))
    assert row[2:6] == [str(os.getpid()), "root", started, str(child)]


def test_json_lists_the_holder(node: Path, holder: subprocess.Popen[str]) -> None:
    done = holders("--device", f"{node.parent}/accel*", "--json")
    assert done.returncode == 0, done.stderr
    found = {entry["pid"]: entry for entry in json.loads(done.stdout)}
    entry = found[holder.pid]
    assert set(entry) == {
        *("pid", "start_time", "name", "cmdline", "uid", "ppid", "devices", "cgroup", "workload", "sigterm"),
        *("user", "create_time", "children"),  # psutil's facts
    }
    assert entry["devices"] == [str(node)]
    assert entry["sigterm"] == "default"  # plain Python: SIGTERM at its default
    assert entry["cmdline"][:2] == [sys.executable, "-c"]
    assert entry["uid"] == 0
    assert isinstance(entry["start_time"], int)


def test_a_holder_in_a_pod_s_cgroup_is_named_by_its_pod(
    tmp_path: Path, node: Path, holder: subprocess.Popen[str]
) -> None:
    """A real cgroup as the kubelet makes it, a real holder moved into it: the WORKLOAD column and the
    --json `workload` name the pod (a fixture kubelet log directory names it)."""
    with KubepodsCgroup() as cgroup:
        cgroup.enter(holder.pid)
        logs = tmp_path / "node" / "var/log/pods" / f"ml_trainer-0_{cgroup.pod_uid}"
        logs.mkdir(parents=True)
        table = holders("--device", f"{node.parent}/accel*", "--node-root", str(tmp_path / "node"))
        done = holders("--device", f"{node.parent}/accel*", "--node-root", str(tmp_path / "node"), "--json")
    assert table.returncode == 0, table.stderr
    row = {int(line.split()[1]): re.split(r"  +", line) for line in table.stdout.splitlines()[1:]}[holder.pid]
    assert row[8:10] == ["pod ml/trainer-0", cgroup.path]
    workload = {entry["pid"]: entry for entry in json.loads(done.stdout)}[holder.pid]["workload"]
    assert workload["kind"] == "pod"
    assert (workload["pod_uid"], workload["container_id"]) == (cgroup.pod_uid, cgroup.container_id)
    assert (workload["runtime"], workload["pod_namespace"], workload["pod_name"]) == (
        "containerd",
        "ml",
        "trainer-0",
    )


def test_no_holder_exits_1_and_says_why(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "accel0").write_text("")
    ProcTree(tmp_path / "proc").add(4100, fds={0: "/dev/null"})
    proc_root = str(tmp_path / "proc")
    done = holders("--device", f"{dev}/accel*", "--proc-root", proc_root)
    assert done.returncode == 1
    assert done.stdout == ""
    assert f"no process holds {dev}/accel0 (1 processes scanned)" in done.stderr
    done = holders("--device", f"{tmp_path}/nothing*", "--json", "--proc-root", proc_root)
    assert done.returncode == 1
    assert json.loads(done.stdout) == []
    assert f"no TPU device file matches {tmp_path}/nothing*" in done.stderr


def test_fixture_tree_shows_names_uids_and_cgroups(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "accel0").write_text("")
    (dev / "accel1").write_text("")
    lock = tmp_path / "libtpu_lockfile"
    lock.write_text("")
    tree = ProcTree(tmp_path / "proc")
    tree.add(
        4000,
        "train one",
        cgroup=f"0::/kubepods/burstable/pod{POD_UID}/{CONTAINER_ID}\n",
        fds={3: f"{dev}/accel1", 4: f"{dev}/accel0"},
        signals=(0x1000, 0x4002),
    )  # SIGTERM (bit 14) caught; SIGINT caught; SIGPIPE ignored
    tree.add(4001, "lockholder", uid=4242424, fds={9: str(lock)})  # no passwd entry: the uid itself
    (tmp_path / "node" / "var/log/pods" / f"ml_trainer-0_{POD_UID}").mkdir(parents=True)
    done = holders(
        *("--device", f"{dev}/accel*", "--extra-path", str(lock), "--proc-root", str(tmp_path / "proc")),
        *("--node-root", str(tmp_path / "node")),
    )
    assert done.returncode == 0, done.stderr
    rows = [re.split(r"  +", line) for line in done.stdout.splitlines()]
    started = "2023-11-14T22:13:30"  # the fixture's boot second plus 1000 ticks, in UTC
    session = "/user.slice/user-0.slice/session-1.scope"
    argv = "python3 train.py"
    assert rows == [
        COLUMNS,
        [
            "train one",
            "4000",
            "1",
            "root",
            started,
            "-",
            "caught",
            f"{dev}/accel0,{dev}/accel1",
            "pod ml/trainer-0",  # the pod's uid from the cgroup, its names from the kubelet's log directory
            f"/kubepods/burstable/pod{POD_UID}/{CONTAINER_ID}",
            argv,
        ],
        [
            *("lockholder", "4001", "1", "4242424", started, "-", "-", str(lock)),  # masks unknown
            *("unit session-1.scope", session, argv),
        ],
    ]
    assert len({column_starts(line) for line in done.stdout.splitlines()}) == 1  # aligned like lsof


def column_starts(line: str) -> tuple[int, ...]:
    starts, end = [], 0
    for cell in re.split(r"  +", line):
        end = line.index(cell, end)
        starts.append(end)
        end += len(cell)
    return tuple(starts)


@pytest.mark.parametrize(
    "args",
    [
        ["--no-such-flag"],
        ["--device"],
        ["--extra-path", ""],
        ["--proc-root", "/no/such/dir"],
        ["--json", "extra"],
    ],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    done = holders(*args)
    assert done.returncode == 2
    assert "error" in done.stderr


def test_a_bad_device_value_is_a_configuration_error_naming_it() -> None:
    done = holders("--device", "")
    assert done.returncode == 78
    assert "--device: devices.patterns: an empty string is not allowed" in done.stderr


def test_the_daemon_s_configuration_names_the_devices(
    tmp_path: Path, node: Path, holder: subprocess.Popen[str]
) -> None:
    """`holders --config F` lists what the daemon with F would drain (its patterns and allowed numbers),
    where the defaults (/dev/accel*, /dev/vfio/*) match nothing of it."""
    config = tmp_path / "config.toml"
    config.write_text(f'[devices]\npatterns = ["{node.parent}/accel*"]\nallow_numbers = ["1:8"]\n')
    bare = [sys.executable, "-m", "watchdog", "holders", "--json"]
    run = {"capture_output": True, "text": True, "check": False, "timeout": 60}
    done = subprocess.run([*bare, "--config", str(config)], **run)  # type: ignore[call-overload]
    assert done.returncode == 0, done.stderr
    assert holder.pid in {entry["pid"] for entry in json.loads(done.stdout)}
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    done = subprocess.run([*bare, "--config", str(empty)], **run)  # type: ignore[call-overload]
    assert holder.pid not in {entry["pid"] for entry in json.loads(done.stdout)}


@pytest.mark.parametrize(("held", "loaded"), [(True, "psutil"), (False, "")])
def test_start_up_stays_light(tmp_path: Path, held: bool, loaded: str) -> None:
    """`holders` runs in shells and probes: it must not pay for the daemon's heavy imports, nor for psutil
    unless there is a holder to describe."""
    (tmp_path / "accel0").write_text("")
    ProcTree(tmp_path / "proc").add(4200, fds={3: str(tmp_path / ("accel0" if held else "other"))})
    heavy = ("requests", "prometheus_client", "psutil", "systemd")
    argv = ["holders", "--device", f"{tmp_path}/accel*", "--proc-root", str(tmp_path / "proc")]
    code = (
        "import sys\n"
        "from watchdog.cli import main\n"
        f"rc = main({argv!r})\n"
        f"sys.stderr.write(' '.join(m for m in {heavy!r} if m in sys.modules))\n"
        "sys.exit(rc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == (0 if held else 1), done.stderr
    assert ("4200" in done.stdout) == held
    assert done.stderr.rsplit("\n", 1)[-1] == loaded


def test_a_kernel_device_the_pattern_matched_is_said_refused(tmp_path: Path) -> None:
    """A node numbered like /dev/kmsg (class mem on the real /sys): `holders` names it and why, on stderr."""
    kmsg = tmp_path / "kmsg"
    os.mknod(kmsg, stat.S_IFCHR | 0o600, os.makedev(1, 11))
    done = holders("--device", f"{tmp_path}/*")
    assert done.returncode == 1
    said = (
        f"warning: not a TPU device, never watched: {kmsg} (1:11): class mem: one of the kernel's own devices"
    )
    assert said in done.stderr
    assert f"no TPU device file matches {tmp_path}/*" in done.stderr


def test_on_a_gpu_host_the_gpu_patterns_and_the_agents(tmp_path: Path) -> None:
    """Without --device, a GPU host (named: this machine may have a VFIO node that `auto` would count) is
    listed as the daemon would see it: the job holding a GPU, the agent named and left alone, a process
    holding only nvidiactl nowhere."""
    with StandInGpuHost(tmp_path / "gpu") as gpu_host:
        job = gpu_host.hold("torchrun", "nvidia0", "nvidiactl")
        agent = gpu_host.hold("nvidia-persistenced", "nvidia0", "nvidia1")
        probe = gpu_host.hold("cuda-probe", "nvidiactl")
        config = tmp_path / "config.toml"
        config.write_text(f'[devices]\nprofile = "nvidia-gpu"\nnvidia_patterns = ["{gpu_host.pattern}"]\n')
        done = subprocess.run(
            [sys.executable, "-m", "watchdog", "holders", "--json", "--config", str(config)],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        pids = {entry["pid"] for entry in json.loads(done.stdout or "[]")}
        assert job.pid in pids, done.stderr
        assert agent.pid not in pids
        assert probe.pid not in pids
        assert f"pid {agent.pid} (nvidia-persiste) is a GPU agent: left alone, never signalled" in done.stderr
