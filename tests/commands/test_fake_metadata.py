"""`tpu-watchdog fake-metadata` as users run it: a real process, its announced port, a scripted change,
and a clean exit on SIGTERM/SIGINT. Usage errors are checked in-process (no server starts)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator

import pytest
import requests

from tests.support.fake_process import launch, stop_all
from watchdog.cli import main
from watchdog.exitcodes import EXIT_USAGE
from watchdog.fake.server import FakeMetadataServer

FLAVOR = {"Metadata-Flavor": "Google"}
ME = "instance/maintenance-event"


@pytest.fixture
def start() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    stop_all(procs)


def test_scripted_change_arrives_and_sigterm_exits_0(start: list[subprocess.Popen[str]]) -> None:
    proc, address = launch(
        start,
        "--set",
        "instance/preempted=TRUE",
        "--at",
        "300ms",
        f"{ME}=TERMINATE_ON_HOST_MAINTENANCE",
    )
    host, port = address.split(":")
    assert host == "127.0.0.1"
    assert int(port) > 0
    url = f"http://{address}/computeMetadata/v1/"
    with requests.Session() as session:
        session.trust_env = False
        assert session.get(url + "instance/preempted", headers=FLAVOR, timeout=10).text == "TRUE"
        first = session.get(url + ME, headers=FLAVOR, timeout=10)
        etag = first.headers["ETag"] if first.text == "NONE" else "0"
        changed = session.get(
            url + ME,
            params={"wait_for_change": "true", "last_etag": etag, "timeout_sec": "30"},
            headers=FLAVOR,
            timeout=40,
        )
    assert changed.text == "TERMINATE_ON_HOST_MAINTENANCE"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert f"+0.300s {ME} = TERMINATE_ON_HOST_MAINTENANCE" in err


def test_sigint_also_exits_0(start: list[subprocess.Popen[str]]) -> None:
    proc, _ = launch(start)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--at", "soon", f"{ME}=X"], "soon"),
        (["--at", "1s", "no-equals-sign"], "no-equals-sign"),
        (["--set", "instance/upcoming-maintenance={oops"], "{oops"),
        (["--set", "instance=x"], "instance"),
        (["--listen", "nowhere"], "nowhere"),
        (["--identity", "node"], "FIELD=VALUE"),
        (["--identity", "worker=x"], "whole number"),
        (["--identity", "colour=blue"], "colour"),
        (["--listen", "0.0.0.0:0"], "--allow-remote"),
    ],
)
def test_bad_arguments_exit_2_naming_them(
    capsys: pytest.CaptureFixture[str], args: list[str], named: str
) -> None:
    assert main(["fake-metadata", *args]) == EXIT_USAGE
    assert named in capsys.readouterr().err


def test_a_busy_port_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeMetadataServer() as busy:
        assert main(["fake-metadata", "--listen", busy.address]) == 1
    assert f"cannot listen on {busy.address}" in capsys.readouterr().err


def test_help_names_the_default_address(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["fake-metadata", "--help"])
    assert "127.0.0.1:8053" in capsys.readouterr().out


def test_identity_flag_serves_a_multislice_host(start: list[subprocess.Popen[str]]) -> None:
    _, address = launch(start, "--identity", "node=train-a,hosts=2,worker=1,slice_id=0,num_slices=2",
                        "--set", "instance/attributes/accelerator-type=v5p-16")  # fmt: skip
    base = f"http://{address}/computeMetadata/v1/instance/attributes"
    env = requests.get(f"{base}/tpu-env", headers=FLAVOR, timeout=10).text
    assert "NODE_ID: 'train-a'" in env
    assert "MEGASCALE_NUM_SLICES: '2'" in env
    assert requests.get(f"{base}/agent-worker-number", headers=FLAVOR, timeout=10).text == "1"
    assert requests.get(f"{base}/accelerator-type", headers=FLAVOR, timeout=10).text == "v5p-16"  # --set wins


def test_identity_flag_serves_a_gpu_vm(start: list[subprocess.Popen[str]]) -> None:
    _, address = launch(start, "--identity", "a3-highgpu-8g,zone=us-east5-a")
    base = f"http://{address}/computeMetadata/v1/instance"
    machine_type = requests.get(f"{base}/machine-type", headers=FLAVOR, timeout=10).text
    assert machine_type == "projects/123456789012/machineTypes/a3-highgpu-8g"
    scheduling = requests.get(f"{base}/scheduling/?recursive=true", headers=FLAVOR, timeout=10).json()
    assert scheduling["onHostMaintenance"] == "TERMINATE"
    assert requests.get(f"{base}/attributes/", headers=FLAVOR, timeout=10).status_code == 404
    assert requests.get(f"{base}/zone", headers=FLAVOR, timeout=10).text.endswith("/zones/us-east5-a")
