"""Conformance of the fake with the real metadata server, rule by rule, over real HTTP on loopback."""

from __future__ import annotations

import socket

import pytest
import requests

from tests.support.http_helpers import FLAVOR, ME, UPCOMING, get, hang
from tests.support.waiting import wait_for
from watchdog.fake.server import FakeMetadataServer


# --- defaults ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (ME, "NONE"),
        ("instance/preempted", "FALSE"),
        ("instance/attributes/accelerator-type", "v4-8"),
        ("instance/attributes/worker-id", "0"),
        ("instance/scheduling/on-host-maintenance", "TERMINATE"),
        ("instance/scheduling/preemptible", "FALSE"),
        ("instance/scheduling/automatic-restart", "TRUE"),
    ],
)
def test_default_values(
    fake: FakeMetadataServer, session: requests.Session, path: str, expected: str
) -> None:
    answer = get(fake, session, path)
    assert (answer.status_code, answer.text) == (200, expected)


def test_identity_keys_look_like_gce(fake: FakeMetadataServer, session: requests.Session) -> None:
    assert get(fake, session, "instance/id").text.isdigit()
    zone = get(fake, session, "instance/zone").text
    assert zone.startswith("projects/")
    assert zone.split("/")[2] == "zones"
    assert zone.endswith("/us-central2-b")
    assert get(fake, session, "instance/hostname").text.endswith(".internal")


def test_upcoming_maintenance_says_no_notifications_with_503(
    fake: FakeMetadataServer, session: requests.Session
) -> None:
    for params in ({}, {"alt": "json"}):
        answer = get(fake, session, UPCOMING, **params)
        assert answer.status_code == 503
        assert answer.json() == {"error": "no notifications have been received yet, try again later"}


def test_unknown_key_is_404(fake: FakeMetadataServer, session: requests.Session) -> None:
    assert get(fake, session, "instance/no-such-key").status_code == 404
    assert get(fake, session, "instance/maintenance-event/").status_code == 404  # a leaf is no directory
    answer = session.get(f"{fake.url}/elsewhere", headers=FLAVOR, timeout=10)
    assert answer.status_code == 404


# --- headers ----------------------------------------------------------------------------------------------
def test_answers_carry_flavor_etag_type_and_length(
    fake: FakeMetadataServer, session: requests.Session
) -> None:
    answer = get(fake, session, ME)
    assert answer.headers["Metadata-Flavor"] == "Google"
    assert answer.headers["ETag"] not in ("", "0")
    assert answer.headers["Content-Type"] == "application/text"
    assert answer.headers["Content-Length"] == "4"


@pytest.mark.parametrize(
    "headers",
    [{}, {"Metadata-Flavor": "google"}, {"Metadata-Flavor": "Google", "X-Forwarded-For": "10.0.0.1"}],
    ids=["no-flavor", "wrong-flavor", "forwarded"],
)
def test_403_without_flavor_or_when_forwarded(
    fake: FakeMetadataServer, session: requests.Session, headers: dict[str, str]
) -> None:
    answer = session.get(f"{fake.url}/computeMetadata/v1/{ME}", headers=headers, timeout=10)
    assert answer.status_code == 403
    assert "NONE" not in answer.text


def test_only_get_is_allowed(fake: FakeMetadataServer, session: requests.Session) -> None:
    answer = session.post(f"{fake.url}/computeMetadata/v1/{ME}", headers=FLAVOR, data="x", timeout=10)
    assert answer.status_code == 405


# --- directories ------------------------------------------------------------------------------------------
def test_directory_lists_children(fake: FakeMetadataServer, session: requests.Session) -> None:
    lines = get(fake, session, "instance/").text.splitlines()
    assert "maintenance-event" in lines
    assert "attributes/" in lines
    assert "scheduling/" in lines
    assert get(fake, session, "instance/attributes/").text.splitlines() == [
        "accelerator-type",
        "agent-worker-number",
        "tpu-env",
        "worker-id",
        "worker-network-endpoints",
    ]
    assert get(fake, session, "").text.splitlines() == ["instance/", "project/", "universe/"]


def test_directory_without_slash_redirects(fake: FakeMetadataServer, session: requests.Session) -> None:
    answer = get(fake, session, "instance")
    assert answer.status_code == 301
    assert answer.headers["Location"] == "/computeMetadata/v1/instance/"


def test_recursive_directory_is_json_in_camel_case(
    fake: FakeMetadataServer, session: requests.Session
) -> None:
    fake.set("instance/attributes/tpu-env", "ACCELERATOR_TYPE: 'v4-8'")
    document = get(fake, session, "instance/", recursive="true").json()
    assert document["maintenanceEvent"] == "NONE"
    assert document["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert document["attributes"]["accelerator-type"] == "v4-8"  # user attribute names stay as they are
    assert document["attributes"]["tpu-env"] == "ACCELERATOR_TYPE: 'v4-8'"
    assert "upcomingMaintenance" not in document  # a 503 answer is no value


def test_recursive_text_lists_paths_and_values(fake: FakeMetadataServer, session: requests.Session) -> None:
    lines = get(fake, session, "instance/scheduling/", recursive="true", alt="text").text.splitlines()
    assert lines == ["automatic-restart TRUE", "on-host-maintenance TERMINATE", "preemptible FALSE"]


# --- formats ----------------------------------------------------------------------------------------------
def test_alt_json_quotes_a_text_value(fake: FakeMetadataServer, session: requests.Session) -> None:
    answer = get(fake, session, ME, alt="json")
    assert answer.text == '"NONE"'
    assert answer.headers["Content-Type"] == "application/json"


def test_upcoming_maintenance_json_and_text_forms(
    fake: FakeMetadataServer, session: requests.Session
) -> None:
    notice = {
        "can_reschedule": "false",
        "latest_window_start_time": "2024-07-29T14:19:53Z",
        "maintenance_status": "PENDING",
        "type": "SCHEDULED",
        "window_end_time": "2024-07-29T18:19:52Z",
        "window_start_time": "2024-07-29T14:19:57Z",
    }
    fake.set(UPCOMING, notice)
    as_json = get(fake, session, UPCOMING, alt="json")
    assert (as_json.status_code, as_json.json()) == (200, notice)
    # Google's own fixture of the text form: sorted `key value` lines, +00:00 timestamps, no final newline.
    assert get(fake, session, UPCOMING).text == (
        "can_reschedule false\n"
        "latest_window_start_time 2024-07-29T14:19:53+00:00\n"
        "maintenance_status PENDING\n"
        "type SCHEDULED\n"
        "window_end_time 2024-07-29T18:19:52+00:00\n"
        "window_start_time 2024-07-29T14:19:57+00:00"
    )
    assert (
        get(fake, session, UPCOMING, alt="json").headers["ETag"]
        == get(fake, session, UPCOMING).headers["ETag"]
    )


@pytest.mark.parametrize(
    "params",
    [
        {"alt": "xml"},
        {"recursive": "yes"},
        {"wait_for_change": "1"},
        {"wait_for_change": "true", "timeout_sec": "1.5"},
    ],
)
def test_bad_query_is_400(
    fake: FakeMetadataServer, session: requests.Session, params: dict[str, str]
) -> None:
    assert get(fake, session, ME, **params).status_code == 400


# --- ETags and changes ------------------------------------------------------------------------------------
def test_etag_changes_exactly_when_content_changes(
    fake: FakeMetadataServer, session: requests.Session
) -> None:
    first = get(fake, session, ME).headers["ETag"]
    assert fake.set(ME, "NONE") is False
    assert get(fake, session, ME).headers["ETag"] == first
    assert fake.set(ME, "MIGRATE_ON_HOST_MAINTENANCE") is True
    second = get(fake, session, ME).headers["ETag"]
    assert second != first
    fake.reset(ME)
    assert get(fake, session, ME).text == "NONE"


def test_delete_makes_a_key_404_and_reset_brings_it_back(
    fake: FakeMetadataServer, session: requests.Session
) -> None:
    fake.delete(UPCOMING)
    assert get(fake, session, UPCOMING).status_code == 404
    with pytest.raises(KeyError):
        fake.delete(UPCOMING)
    fake.reset()
    assert get(fake, session, UPCOMING).status_code == 503


# --- wait_for_change --------------------------------------------------------------------------------------
def test_wait_with_a_different_last_etag_answers_at_once(
    fake: FakeMetadataServer, session: requests.Session
) -> None:
    for last in ("0", "NONE", "stale"):
        answer = get(fake, session, ME, wait_for_change="true", last_etag=last, timeout_sec="600")
        assert (answer.status_code, answer.text) == (200, "NONE")


@pytest.mark.parametrize("with_last_etag", [True, False])
def test_wait_hangs_until_the_value_changes(
    fake: FakeMetadataServer, session: requests.Session, with_last_etag: bool
) -> None:
    before = get(fake, session, ME).headers["ETag"]
    params = {"last_etag": before} if with_last_etag else {}
    waiting = hang(fake, ME, timeout_sec="60", **params)
    wait_for(lambda: fake.hanging() == 1, what="the GET to hang")
    assert not waiting.done()
    fake.set(ME, "TERMINATE_ON_HOST_MAINTENANCE")
    answer = waiting.result()
    assert (answer.status_code, answer.text) == (200, "TERMINATE_ON_HOST_MAINTENANCE")
    assert answer.headers["ETag"] != before


def test_wait_returns_the_current_value_at_timeout(
    fake: FakeMetadataServer, session: requests.Session
) -> None:
    etag = get(fake, session, ME).headers["ETag"]
    answer = get(fake, session, ME, wait_for_change="true", last_etag=etag, timeout_sec="1")
    assert (answer.status_code, answer.text, answer.headers["ETag"]) == (200, "NONE", etag)
    assert fake.requests()[-1].note == "timeout"


def test_setting_the_same_value_does_not_wake_a_hanging_get(fake: FakeMetadataServer) -> None:
    waiting = hang(fake, ME, timeout_sec="1")
    wait_for(lambda: fake.hanging() == 1, what="the GET to hang")
    fake.set(ME, "NONE")
    answer = waiting.result()
    assert answer.text == "NONE"
    assert fake.requests()[-1].note == "timeout"  # not "changed": it slept through the same-value set


def test_wait_on_a_plain_directory_is_400_but_recursive_works(
    fake: FakeMetadataServer, session: requests.Session
) -> None:
    assert get(fake, session, "instance/", wait_for_change="true").status_code == 400
    waiting = hang(fake, "instance/", recursive="true", timeout_sec="60")
    wait_for(lambda: fake.hanging() == 1, what="the GET to hang")
    fake.set("instance/preempted", "TRUE")
    assert waiting.result().json()["preempted"] == "TRUE"


def test_many_hanging_gets_all_wake_on_one_change(fake: FakeMetadataServer) -> None:
    waiting = [hang(fake, "instance/preempted", timeout_sec="60") for _ in range(20)]
    wait_for(lambda: fake.hanging() == 20, what="20 GETs to hang")
    fake.set("instance/preempted", "TRUE")
    assert [w.result().text for w in waiting] == ["TRUE"] * 20


def test_a_key_deleted_while_waiting_answers_404(fake: FakeMetadataServer) -> None:
    waiting = hang(fake, UPCOMING, timeout_sec="60")
    wait_for(lambda: fake.hanging() == 1, what="the GET to hang")
    fake.delete(UPCOMING)
    assert waiting.result().status_code == 404


def test_expire_hanging_answers_every_hanging_get_as_at_its_timeout(
    fake: FakeMetadataServer, session: requests.Session
) -> None:
    etag = get(fake, session, ME).headers["ETag"]
    waiting = [hang(fake, ME, last_etag=etag, timeout_sec="600") for _ in range(3)]
    wait_for(lambda: fake.hanging() == 3, what="3 GETs to hang")
    fake.expire_hanging()
    answers = [w.result(timeout=10) for w in waiting]
    assert [(a.status_code, a.text, a.headers["ETag"]) for a in answers] == [(200, "NONE", etag)] * 3
    assert [r.note for r in fake.requests()[-3:]] == ["timeout"] * 3


def test_stop_ends_hanging_gets(fake: FakeMetadataServer) -> None:
    waiting = [hang(fake, ME, timeout_sec="600") for _ in range(3)]
    wait_for(lambda: fake.hanging() == 3, what="3 GETs to hang")
    fake.stop()
    for w in waiting:
        assert w.result(timeout=10).status_code == 503


# --- where it listens -------------------------------------------------------------------------------------
def test_refuses_a_non_loopback_address_unless_allowed() -> None:
    with pytest.raises(ValueError, match="allow_remote"):
        FakeMetadataServer(listen="0.0.0.0:0")
    FakeMetadataServer(listen="0.0.0.0:0", allow_remote=True)  # constructed, never started


def test_address_and_url(fake: FakeMetadataServer) -> None:
    host, port = fake.address.split(":")
    assert host == "127.0.0.1"
    assert int(port) > 0
    assert fake.url == f"http://{fake.address}"


def test_serves_on_ipv6_loopback(session: requests.Session) -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    try:
        server = FakeMetadataServer(listen="[::1]:0").start()
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback: {exc}")
    try:
        assert server.address.startswith("[::1]:")
        assert get(server, session, ME).text == "NONE"
    finally:
        server.stop()


def test_starts_once_and_keeps_its_address_after_stop() -> None:
    fake = FakeMetadataServer().start()
    address = fake.address
    with pytest.raises(RuntimeError, match="starts once"):
        fake.start()
    fake.stop()
    fake.stop()  # idempotent
    assert fake.address == address
    with pytest.raises(RuntimeError, match="starts once"):
        fake.start()
