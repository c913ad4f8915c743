"""The simulated hosts' plain parts (watchdog/fake/hosts.py): each host's identity on its metadata server
(slice-major numbering, Multislice keys only on Multislice) and each process's command line. The hosts
themselves run in tests/system/test_multihost.py."""

from __future__ import annotations

from pathlib import Path

from watchdog.fake.hosts import TRAINER, Job, SimulatedHost, tpu_identity
from watchdog.fake.server import FakeMetadataServer


def test_multislice_hosts_are_numbered_slice_major_with_megascale_keys() -> None:
    job = Job(hosts=4, slices=2)
    hosts = [tpu_identity(index, job, "127.0.0.1:4321").values() for index in range(4)]
    last = hosts[3]
    assert last["instance/attributes/agent-worker-number"] == "1"
    env = last["instance/attributes/tpu-env"]
    assert "MEGASCALE_SLICE_ID: '1'" in env
    assert "MEGASCALE_NUM_SLICES: '2'" in env
    assert "MEGASCALE_COORDINATOR_ADDRESS: '127.0.0.1:4321'" in env  # the job's own coordinator
    assert "NODE_ID: 'fake-slice-1'" in env
    assert last["instance/attributes/accelerator-type"] == "v5litepod-8"  # 2 hosts x 4 chips per slice
    assert len(last["instance/attributes/worker-network-endpoints"].split(",")) == 2  # the slice's hosts
    assert len({host["instance/id"] for host in hosts}) == 4  # every VM its own
    assert len({host["instance/name"] for host in hosts}) == 4


def test_one_slice_has_no_megascale_keys() -> None:
    env = tpu_identity(1, Job(hosts=2), "127.0.0.1:4321").values()["instance/attributes/tpu-env"]
    assert "WORKER_ID: '1'" in env
    assert "MEGASCALE" not in env


def test_each_process_gets_its_id_its_device_and_the_shared_checkpoints(tmp_path: Path) -> None:
    host = SimulatedHost(1, tmp_path, tmp_path / "accel0", FakeMetadataServer())
    argv = Job(hosts=2, save_interval=77).argv("python3", host, "127.0.0.1:9", tmp_path / "ckpt")
    assert argv[:2] == ["python3", str(TRAINER)]
    flags = dict(zip(argv[2::2], argv[3::2], strict=True))
    assert flags["--process-id"] == "1"
    assert flags["--num-processes"] == "2"
    assert flags["--hold"] == str(tmp_path / "accel0")
    assert flags["--checkpoint-dir"] == str(tmp_path / "ckpt")
    assert flags["--save-interval"] == "77"
    assert flags["--coordinator"] == "127.0.0.1:9"
