"""A real metadata client accepts the fake: google-auth's compute_engine client (what every Google client
library on a VM uses) against `tpu-watchdog fake-metadata` as a process, from a job process of its own
pointed at it by GCE_METADATA_HOST / GCE_METADATA_IP, as in a rehearsal."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.support.fake_process import launch, stop_all
from tests.support.readable import readable
from tests.support.waiting import wait_for

# The job: every call google-auth makes to learn it is on GCE, who it is and a token; then one hanging GET,
# whose answer it prints when it returns.
JOB = """
import json, sys
import google.auth
import google.auth.compute_engine
from google.auth.compute_engine import _metadata
from google.auth.transport.requests import Request

request = Request()
facts = {"ping": _metadata.ping(request), "project_id": _metadata.get_project_id(request)}
facts["key"] = _metadata.get(request, "instance/maintenance-event")
facts["recursive"] = _metadata.get(request, "instance/scheduling/", recursive=True)
facts["account"] = _metadata.get_service_account_info(request)
facts["token"] = _metadata.get_service_account_token(request)[0]
facts["token_by_email"] = _metadata.get_service_account_token(request, facts["account"]["email"])[0]
credentials, facts["default_project"] = google.auth.default()
credentials.refresh(request)
email = credentials.service_account_email
facts["default_credentials"] = [type(credentials).__name__, credentials.token, email]
print(json.dumps(facts), flush=True)
hang = {"wait_for_change": "true", "timeout_sec": "60"}
changed = _metadata.get(request, "instance/maintenance-event", params=hang)
print(json.dumps({"changed": changed}), flush=True)
"""


@pytest.fixture
def fake() -> Iterator[str]:
    procs: list[subprocess.Popen[str]] = []
    try:
        yield launch(procs)[1]
    finally:
        stop_all(procs)


def job_env(address: str, home: Path) -> dict[str, str]:
    """The job's environment: the fake as its metadata server, no proxy, no credentials of this machine."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower() and not k.startswith("GOOGLE_")}
    home.mkdir()
    return {**env, "GCE_METADATA_HOST": address, "GCE_METADATA_IP": address, "NO_PROXY": "*",
            "HOME": str(home), "CLOUDSDK_CONFIG": str(home / "gcloud")}  # fmt: skip


def line_of(job: subprocess.Popen[str]) -> dict[str, object]:
    assert job.stdout is not None
    if not readable([job.stdout], 30):
        job.kill()
        raise AssertionError(f"the job printed nothing: {job.communicate(timeout=10)}")
    line = job.stdout.readline()
    assert line, f"the job ended: {job.communicate(timeout=10)}"
    document: dict[str, object] = json.loads(line)
    return document


def test_google_auth_finds_gce_a_project_an_account_and_a_token_and_watches(
    fake: str, tmp_path: Path
) -> None:
    assert importlib.util.find_spec("google.auth"), "google-auth is a dev dependency: run `make setup`"
    job = subprocess.Popen([sys.executable, "-c", JOB], env=job_env(fake, tmp_path / "home"),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        facts = line_of(job)
        assert facts["ping"] is True
        assert facts["project_id"] == facts["default_project"] == "fake-project"
        assert facts["key"] == "NONE"
        assert facts["recursive"] == {"onHostMaintenance": "TERMINATE", "preemptible": "FALSE",
                                      "automaticRestart": "TRUE"}  # fmt: skip
        account = facts["account"]
        assert isinstance(account, dict)
        assert account["aliases"] == ["default"]
        assert account["scopes"] == ["https://www.googleapis.com/auth/cloud-platform"]
        assert str(account["email"]).endswith("-compute@developer.gserviceaccount.com")
        assert facts["token"] == facts["token_by_email"]
        assert "not-a-secret" in str(facts["token"])
        assert facts["default_credentials"] == ["Credentials", facts["token"], account["email"]]

        control = f"http://{fake}/_fake"
        wait_for(lambda: requests.get(f"{control}/hanging", timeout=10).json()["hanging"] == 1,
                 timeout=30, what="the job's hanging GET")  # fmt: skip
        requests.put(
            f"{control}/v1/instance/maintenance-event", data="TERMINATE_ON_HOST_MAINTENANCE", timeout=10
        )
        assert line_of(job) == {"changed": "TERMINATE_ON_HOST_MAINTENANCE"}
        assert job.wait(timeout=30) == 0
    finally:
        if job.poll() is None:
            job.kill()
        job.communicate(timeout=10)
