"""The HTTP mechanics of the fake: keep-alive, lost clients, injected faults, and the control API."""

from __future__ import annotations

import http.client
import json
import os
import resource
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

from tests.support.http_helpers import FLAVOR, ME, UPCOMING, get
from tests.support.waiting import wait_for
from watchdog.fake.faults import OVERSIZED_BYTES
from watchdog.fake.server import FakeMetadataServer, Fault


def test_a_client_that_goes_away_frees_its_hanging_request(fake: FakeMetadataServer) -> None:
    host, port = fake.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as client:
        client.sendall(
            f"GET /computeMetadata/v1/{ME}?wait_for_change=true HTTP/1.1\r\n"
            "Host: x\r\nMetadata-Flavor: Google\r\n\r\n".encode()
        )
        wait_for(lambda: fake.hanging() == 1, what="the GET to hang")
    wait_for(lambda: fake.hanging() == 0, what="the server to notice the client left")
    wait_for(lambda: fake.requests() and fake.requests()[-1].note == "abandoned", what="the record")


def test_a_client_that_goes_away_is_noticed_on_a_descriptor_above_1023() -> None:
    """select() refuses descriptors past 1023 (ValueError in the handler: the GET hung until its timeout);
    a fifty-host fleet in one test process has them. Hold the low ones: the server socket gets a high one."""
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if limit != resource.RLIM_INFINITY and limit < 1100:
        pytest.skip(f"RLIMIT_NOFILE is {limit}: no descriptor above 1023 to be had")
    held = []
    try:
        while not held or held[-1] < 1030:
            held.append(os.open(os.devnull, os.O_RDONLY))
        with FakeMetadataServer() as fake:
            test_a_client_that_goes_away_frees_its_hanging_request(fake)
            assert not [r for r in fake.requests() if r.status >= 500], fake.requests()
    finally:
        for fd in held:
            os.close(fd)


# --- HTTP/1.1 ---------------------------------------------------------------------------------------------
def test_keep_alive_serves_several_requests_on_one_connection(fake: FakeMetadataServer) -> None:
    host, port = fake.address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        bodies = []
        connection.connect()
        first_socket = connection.sock
        for path in (ME, "instance/no-such-key", "instance/preempted"):
            connection.request("GET", f"/computeMetadata/v1/{path}", headers=FLAVOR)
            response = connection.getresponse()
            assert response.getheader("Content-Length") is not None
            bodies.append(response.read())
            assert connection.sock is first_socket  # the same connection, kept alive
        assert bodies[0] == b"NONE"
        assert bodies[2] == b"FALSE"
    finally:
        connection.close()


# --- above /computeMetadata/v1/ ---------------------------------------------------------------------------
def test_the_root_answers_a_ping_without_a_flavor_header(
    fake: FakeMetadataServer, session: requests.Session
) -> None:
    """Google's Go client pings the root without the header and trusts the one in the answer."""
    answer = session.get(f"{fake.url}/", timeout=10)
    assert (answer.status_code, answer.text) == (200, "computeMetadata/\n")
    assert answer.headers["Metadata-Flavor"] == "Google"


def test_compute_metadata_lists_v1_and_needs_the_header(
    fake: FakeMetadataServer, session: requests.Session
) -> None:
    url = f"{fake.url}/computeMetadata/"
    assert session.get(url, timeout=10).status_code == 403
    answer = session.get(url, headers=FLAVOR, timeout=10)
    assert (answer.status_code, answer.text) == (200, "v1/\n")
    moved = session.get(f"{fake.url}/computeMetadata", headers=FLAVOR, timeout=10, allow_redirects=False)
    assert (moved.status_code, moved.headers["Location"]) == (301, "/computeMetadata/")
    assert session.post(url, headers=FLAVOR, timeout=10).status_code == 405
    assert session.get(f"{fake.url}/elsewhere", headers=FLAVOR, timeout=10).status_code == 404
    logged = [(r.path, r.flavor_present, r.status) for r in fake.requests()]
    assert logged == [("/computeMetadata/", False, 403), ("/computeMetadata/", True, 200),
                      ("/computeMetadata", True, 301), ("/computeMetadata/", True, 405)]  # fmt: skip


# --- faults -----------------------------------------------------------------------------------------------
def test_status_fault_answers_the_next_n_matching_requests(
    fake: FakeMetadataServer, session: requests.Session
) -> None:
    fake.add_fault(Fault(kind="status", status=503, count=2, path="instance/preempted"))
    assert get(fake, session, ME).status_code == 200  # another path is untouched
    assert [get(fake, session, "instance/preempted").status_code for _ in range(3)] == [503, 503, 200]


def test_reset_fault_closes_without_an_answer(fake: FakeMetadataServer, session: requests.Session) -> None:
    fake.add_fault(Fault(kind="reset"))
    with pytest.raises(requests.ConnectionError):
        get(fake, session, ME)
    assert get(fake, session, ME).text == "NONE"
    assert fake.requests()[-2].status == 0


def test_delay_fault_answers_late_but_right(fake: FakeMetadataServer, session: requests.Session) -> None:
    fake.add_fault(Fault(kind="delay", seconds=0.2))
    assert get(fake, session, ME).text == "NONE"
    assert fake.requests()[-1].note == "fault:delay"


def test_each_record_says_when_its_answer_went_out_and_what_it_served(
    fake: FakeMetadataServer, session: requests.Session
) -> None:
    """A hanging GET arrives, the value changes, the answer goes out: the record has both times and the
    value, so what a client was told and when is known from the server's side."""
    etag = get(fake, session, ME).headers["ETag"]
    url = f"{fake.url}/computeMetadata/v1/{ME}"
    params = {"wait_for_change": "true", "last_etag": etag, "timeout_sec": "30"}
    with ThreadPoolExecutor(1) as pool:
        hanging = pool.submit(session.get, url, headers=FLAVOR, params=params, timeout=10)
        wait_for(lambda: fake.hanging() == 1, what="the GET to hang")
        changed = time.time()
        fake.set(ME, "TERMINATE_ON_HOST_MAINTENANCE")
        assert hanging.result().text == "TERMINATE_ON_HOST_MAINTENANCE"
    record = fake.requests()[-1]
    assert record.answered is not None
    assert record.time < changed <= record.answered
    assert (record.status, record.value) == (200, "TERMINATE_ON_HOST_MAINTENANCE")
    fake.add_fault(Fault(kind="trickle", seconds=0.4))
    get(fake, session, ME)
    trickled = fake.requests()[-1]
    assert trickled.answered is not None
    assert trickled.answered >= trickled.time + 0.4  # when its last byte is due
    fake.add_fault(Fault(kind="status", status=503))
    get(fake, session, ME)
    assert (fake.requests()[-1].status, fake.requests()[-1].value) == (503, "")


def test_garbage_fault_sends_binary_bytes(fake: FakeMetadataServer, session: requests.Session) -> None:
    fake.add_fault(Fault(kind="garbage"))
    answer = get(fake, session, ME)
    assert answer.status_code == 200
    with pytest.raises(UnicodeDecodeError):
        answer.content.decode()
    assert b"\x00" in answer.content


def test_oversized_fault_sends_2_mib_or_the_size_asked(
    fake: FakeMetadataServer, session: requests.Session
) -> None:
    fake.add_fault(Fault(kind="oversized"))
    fake.add_fault(Fault(kind="oversized", size=70_000))
    assert len(get(fake, session, ME).content) == OVERSIZED_BYTES == 2 * 1024 * 1024
    assert len(get(fake, session, ME).content) == 70_000


def test_trickle_fault_sends_the_right_body_a_byte_at_a_time(
    fake: FakeMetadataServer, session: requests.Session
) -> None:
    fake.add_fault(Fault(kind="trickle", seconds=0.4))
    url = f"{fake.url}/computeMetadata/v1/{ME}"
    with session.get(url, headers=FLAVOR, timeout=10, stream=True) as answer:
        assert answer.headers["Content-Length"] == "4"  # headers first, then the body drips
        pieces = list(answer.raw.stream(1))
    assert b"".join(pieces) == b"NONE"
    assert fake.requests()[-1].note == "fault:trickle"


def test_etag_fault_answers_a_hanging_get_at_once_with_a_new_etag_and_the_same_value(
    fake: FakeMetadataServer, session: requests.Session
) -> None:
    etag = get(fake, session, ME).headers["ETag"]
    fake.add_fault(Fault(kind="etag"))
    answer = get(fake, session, ME, wait_for_change="true", last_etag=etag, timeout_sec="30")
    assert answer.text == "NONE"
    assert answer.headers["ETag"] != etag
    assert get(fake, session, ME).headers["ETag"] == etag  # the store itself did not change


def test_no_flavor_fault_drops_the_response_header(
    fake: FakeMetadataServer, session: requests.Session
) -> None:
    fake.add_fault(Fault(kind="no_flavor"))
    answer = get(fake, session, ME)
    assert answer.text == "NONE"
    assert "Metadata-Flavor" not in answer.headers
    assert get(fake, session, ME).headers["Metadata-Flavor"] == "Google"


# --- the control API --------------------------------------------------------------------------------------
def control(session: requests.Session, method: str, fake: FakeMetadataServer, path: str, **kw: Any) -> Any:
    answer = session.request(method, f"{fake.url}/_fake/{path}", timeout=10, **kw)
    return answer.status_code, answer.json()


def test_control_sets_deletes_and_resets_values(fake: FakeMetadataServer, session: requests.Session) -> None:
    status, body = control(session, "PUT", fake, f"v1/{ME}", data="TERMINATE_ON_HOST_MAINTENANCE")
    assert status == 200
    assert body["changed"] is True
    assert get(fake, session, ME).text == "TERMINATE_ON_HOST_MAINTENANCE"
    notice = {"type": "UNSCHEDULED", "maintenance_status": "ONGOING"}
    assert control(session, "PUT", fake, f"v1/{UPCOMING}", data=json.dumps(notice))[0] == 200
    assert get(fake, session, UPCOMING, alt="json").json() == notice
    assert control(session, "PUT", fake, f"v1/{UPCOMING}", data="{not json")[0] == 400
    assert control(session, "DELETE", fake, "v1/instance/preempted")[0] == 200
    assert control(session, "DELETE", fake, "v1/instance/preempted")[0] == 404
    assert get(fake, session, "instance/preempted").status_code == 404
    assert control(session, "POST", fake, "reset", json={"path": ME})[0] == 200
    assert get(fake, session, ME).text == "NONE"
    assert get(fake, session, UPCOMING).status_code == 200  # only ME was reset
    assert control(session, "POST", fake, "reset", json={})[0] == 200
    assert get(fake, session, "instance/preempted").text == "FALSE"


def test_control_can_set_an_error_status(fake: FakeMetadataServer, session: requests.Session) -> None:
    assert control(session, "PUT", fake, f"v1/{UPCOMING}?status=503", data="{}")[0] == 200
    answer = get(fake, session, UPCOMING)
    assert (answer.status_code, answer.text) == (503, "{}")


def test_control_adds_faults(fake: FakeMetadataServer, session: requests.Session) -> None:
    fault = {"kind": "status", "status": 500, "count": 1, "path": ME}
    assert control(session, "POST", fake, "faults", json=fault)[0] == 200
    assert control(session, "GET", fake, "faults")[1][0]["status"] == 500
    assert get(fake, session, ME).status_code == 500
    assert control(session, "GET", fake, "faults")[1] == []
    status, body = control(session, "POST", fake, "faults", json={"kind": "explode"})
    assert status == 400
    assert "explode" in body["error"]


def test_control_lists_metadata_requests_only(fake: FakeMetadataServer, session: requests.Session) -> None:
    get(fake, session, ME, alt="text")
    session.get(f"{fake.url}/computeMetadata/v1/{ME}", timeout=10)  # no flavor
    status, records = control(session, "GET", fake, "requests")
    assert status == 200
    assert [(r["path"], r["query"], r["flavor_present"], r["status"]) for r in records] == [
        (ME, "alt=text", True, 200),
        (ME, "", False, 403),
    ]


def test_unknown_control_endpoint_is_404(fake: FakeMetadataServer, session: requests.Session) -> None:
    assert control(session, "GET", fake, "nothing-here")[0] == 404
