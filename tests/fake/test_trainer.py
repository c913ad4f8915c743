"""The demo's training job, run for real on a real device node: it holds the node, checkpoints on its
interval, and on SIGTERM saves one more checkpoint at the current step, closes the device and exits 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.waiting import wait_for
from tests.support.workloads import make_device
from watchdog.fake.trainer import save


@pytest.fixture
def node(tmp_path: Path) -> Path:
    try:
        return make_device(tmp_path)
    except OSError as exc:
        pytest.skip(f"cannot mknod a device node here ({exc}); needs root on a filesystem without nodev")


@pytest.fixture
def job(node: Path, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "watchdog.fake.trainer", "--hold", str(node),
         "--checkpoint-dir", str(tmp_path / "ckpt"), "--save-every", "5", "--step-seconds", "0.001"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=20)
    assert proc.stdout is not None
    proc.stdout.close()


def checkpoints(directory: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(directory.glob("checkpoint-*.json"))]


def test_sigterm_saves_at_the_current_step_and_exits_0(
    node: Path, tmp_path: Path, job: subprocess.Popen[str]
) -> None:
    assert job.stdout is not None
    assert job.stdout.readline() == f"training (pid {job.pid}), holding {node}\n"  # after the handler is set
    fd_dir = f"/proc/{job.pid}/fd"
    assert str(node) in {os.readlink(f"{fd_dir}/{fd}") for fd in os.listdir(fd_dir)}  # it holds the node
    ckpt = tmp_path / "ckpt"
    wait_for(lambda: len(checkpoints(ckpt)) >= 2, timeout=20, what="two interval checkpoints")
    job.send_signal(signal.SIGTERM)
    said = job.stdout.readline()
    assert job.wait(timeout=20) == 0
    saved = checkpoints(ckpt)
    *interval, last = saved
    assert all(c["reason"] == "interval" and c["step"] % 5 == 0 for c in interval)
    assert last["reason"] == "SIGTERM"
    assert last["step"] >= interval[-1]["step"]  # the current step, not the last interval's
    assert (
        said
        == f"SIGTERM: checkpoint saved at step {last['step']} -> {ckpt}/checkpoint-{last['step']:06d}.json\n"
    )
    assert list(ckpt.glob("*.tmp")) == []  # every save was atomic


def test_a_device_it_cannot_open_is_an_error_before_training(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "watchdog.fake.trainer", "--hold", str(tmp_path / "absent"),
         "--checkpoint-dir", str(tmp_path / "ckpt")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "FileNotFoundError" in done.stderr
    assert not (tmp_path / "ckpt").exists()  # nothing trained, nothing saved


def test_save_writes_a_named_checkpoint_atomically(tmp_path: Path) -> None:
    path = save(tmp_path, 42, "SIGTERM")
    assert path == tmp_path / "checkpoint-000042.json"
    saved = json.loads(path.read_text())
    assert (saved["step"], saved["reason"]) == (42, "SIGTERM")
    assert save(tmp_path, 42, "interval") == path  # the same step again replaces it
    assert json.loads(path.read_text())["reason"] == "interval"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-000042.json"]
