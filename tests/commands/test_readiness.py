"""`tpu-watchdog readiness` for real: real holders of each SIGTERM kind (Python children that catch, ignore
or leave SIGTERM at its default; a real JAX process after jax.distributed.initialize and a plain one), the
verdict per process and the exit status. Nothing is signalled: every holder is still alive afterwards.

Each run is in a private PID namespace (unshare) with its holders, so the scan sees nothing else.
"""

from __future__ import annotations

import importlib.util
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.kubepods import KubepodsCgroup
from tests.support.workloads import HOLD_FLAGS, UniqueDevice
from watchdog.commands.readiness import judge
from watchdog.host.holders import HolderScanner, ScanResult

REPO = Path(__file__).resolve().parents[2]
HOLD = "import os, sys; fd = os.open(sys.argv[1], int(sys.argv[2])); print('ready', flush=True); input()"

# A JAX process holding the device: "plain" (no distributed runtime) or "initialized" (on loopback, alone).
JAX_HOLDER = r"""
import os, socket, sys
device, kind = sys.argv[1], sys.argv[2]
import jax
if kind == "initialized":
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=1, process_id=0,
                               cluster_detection_method="deactivate")
jax.numpy.zeros(4).block_until_ready()
fd = os.open(device, os.O_RDONLY)
print("ready", flush=True)
sys.stdin.read()
"""

# PID 1 of the namespace: starts the holders, runs readiness, says whether each holder is still alive.
DRIVER = r"""
import subprocess, sys
from pathlib import Path
from tests.support.workloads import TEST_ALLOW, Child, make_device
device = make_device(Path(sys.argv[1]))
children = [Child(mode, device) for mode in sys.argv[2].split(",") if mode]
for child in children:
    child.wait_ready()
jax = [subprocess.Popen([sys.executable, "-c", sys.argv[4], str(device), kind], stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE, text=True) for kind in sys.argv[3].split(",") if kind]
for proc in jax:
    assert proc.stdout.readline().strip() == "ready"
print("pids:", ",".join(str(c.popen.pid) for c in children), ",".join(str(p.pid) for p in jax), flush=True)
done = subprocess.run([sys.executable, "-m", "watchdog", "readiness", "--device", str(device),
                       "--allow-number", TEST_ALLOW, *sys.argv[5:]])
alive = [c.alive() for c in children] + [p.poll() is None for p in jax]
print("alive:", ",".join(map(str, alive)), flush=True)
for child in children:
    child.close()
for proc in jax:
    proc.kill()
    proc.wait()
sys.exit(done.returncode)
"""

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
needs_jax = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax missing (test extras)")


def readiness(tmp_path: Path, modes: str, jax: str = "", *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "none.toml").write_text("# an empty configuration: every default\n")
    return subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", DRIVER, str(tmp_path), modes,
         jax, JAX_HOLDER, "--config", str(tmp_path / "none.toml"), *args],
        capture_output=True, text=True, timeout=180, check=False, cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"},
    )  # fmt: skip


def verdicts(stdout: str) -> dict[int, str]:
    """pid -> its verdict, the wrapped lines joined."""
    found: dict[int, str] = {}
    pid = None
    for line in stdout.splitlines():
        words = line.split()
        if len(words) > 2 and words[0] in ("ok", "LOST") and words[1] == "pid":
            pid = int(words[2])
            found[pid] = line
        elif pid is not None and line.startswith("       ") and words[0] != "command:":
            found[pid] += " " + line.strip()
        else:
            pid = None
    return found


def pids(stdout: str) -> list[int]:
    line = next(line for line in stdout.splitlines() if line.startswith("pids:"))
    return [int(pid) for part in line.split()[1:] for pid in part.split(",") if pid]


def test_each_kind_of_python_holder_gets_its_verdict_and_none_is_signalled(tmp_path: Path) -> None:
    done = readiness(tmp_path, "handled,default,ignore")
    assert done.returncode == 1, done.stdout + done.stderr  # some will lose their progress
    handled, default, ignored = pids(done.stdout)
    said = verdicts(done.stdout)
    assert said[handled].startswith("  ok")
    assert "ready: SIGTERM is caught" in said[handled]
    assert "WOULD LOSE ITS PROGRESS" in said[default]
    assert "before any save" in said[default]
    assert "WOULD BE KILLED AT THE DEADLINE" in said[ignored]
    assert said[ignored].endswith("saving nothing on the way")  # the wrapped line belongs to its verdict
    assert "'caught' proves a handler, not a checkpoint" in " ".join(done.stdout.split())  # said plainly
    assert "alive: True,True,True" in done.stdout  # no signal was sent


def test_all_ready_is_exit_0_and_no_holder_is_exit_3(tmp_path: Path) -> None:
    done = readiness(tmp_path, "handled,slow", "", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count('"sigterm": "caught"') == 2
    (tmp_path / "alone").mkdir()
    nothing = readiness(tmp_path / "alone", "")
    assert nothing.returncode == 3, nothing.stdout + nothing.stderr
    assert "nothing holds a TPU device" in nothing.stderr


@needs_jax
def test_jax_is_ready_after_distributed_initialize_and_not_without(tmp_path: Path) -> None:
    done = readiness(tmp_path, "", "initialized,plain")
    assert done.returncode == 1, done.stdout + done.stderr
    initialized, plain = pids(done.stdout)
    said = verdicts(done.stdout)
    assert "ready: SIGTERM is caught" in said[initialized]  # JAX's preemption notifier owns SIGTERM
    assert "WOULD LOSE ITS PROGRESS" in said[plain]  # plain JAX: SIGTERM's default kills it, nothing saved
    assert "alive: True,True" in done.stdout


def test_processes_it_may_not_read_are_said() -> None:
    """Unprivileged, other users' fds are closed to the scan (counted as unreadable: tests/host): said, not a
    silent "nothing holds a TPU device"."""
    out, err = io.StringIO(), io.StringIO()
    assert (
        judge(
            ScanResult(holders=(), devices=("/dev/accel0",), unreadable=3), ["/dev/accel*"], False, out, err
        )
        == 3
    )
    assert "3 processes could not be read (run as root to see them)" in err.getvalue()
    assert "nothing holds a TPU device (/dev/accel*)" in err.getvalue()


def test_the_verdict_names_the_pod_that_would_lose_its_progress(tmp_path: Path) -> None:
    """A real holder in a real cgroup laid out as the kubelet's: its verdict names its pod (by uid: no kubelet
    files here) in the text, and the JSON carries its workload."""
    with UniqueDevice(tmp_path) as device, KubepodsCgroup() as cgroup, subprocess.Popen(
        [sys.executable, "-c", HOLD, str(device.path), str(HOLD_FLAGS)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    ) as proc:  # fmt: skip
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        cgroup.enter(proc.pid)
        scan = HolderScanner(patterns=[str(device.path)], node_root=str(tmp_path)).scan()
        text, as_json = io.StringIO(), io.StringIO()
        assert judge(scan, [str(device.path)], False, text, io.StringIO()) == 1
        assert judge(scan, [str(device.path)], True, as_json, io.StringIO()) == 1
        proc.kill()
    said = " ".join(text.getvalue().split())
    (entry,) = json.loads(as_json.getvalue())
    assert f"LOST pid {proc.pid} ({entry['name']}, pod uid {cgroup.pod_uid}): WOULD LOSE ITS PROGRESS" in said
    assert (entry["workload"]["pod_uid"], entry["workload"]["container_id"]) == (
        cgroup.pod_uid,
        cgroup.container_id,
    )
