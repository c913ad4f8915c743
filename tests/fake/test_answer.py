"""The protocol rules as plain functions: query parsing and rendering, without HTTP."""

from __future__ import annotations

import json
import threading

import pytest

from watchdog.fake.accounts import DEFAULT_EMAIL, DEFAULT_SCOPES
from watchdog.fake.answer import Query, QueryError, answer_above_v1, answer_metadata, parse_query
from watchdog.fake.store import MetadataStore


def test_empty_query_is_the_default() -> None:
    assert parse_query("") == Query()


def test_full_query() -> None:
    query = parse_query("wait_for_change=TRUE&recursive=true&alt=json&last_etag=abc&timeout_sec=60")
    assert query == Query(wait_for_change=True, recursive=True, alt="json", last_etag="abc", timeout_sec=60)


def test_first_of_repeated_parameters_wins() -> None:
    assert parse_query("alt=text&alt=json").alt == "text"


def test_unknown_and_empty_fields_are_ignored() -> None:
    assert parse_query("alt=json&&x=1&") == Query(alt="json")


@pytest.mark.parametrize(
    "raw",
    [
        "timeout_sec=1.5",
        "timeout_sec=-1",
        "timeout_sec=",
        "timeout_sec=1e3",
        "alt=yaml",
        "recursive=1",
    ],
)
def test_malformed_queries(raw: str) -> None:
    with pytest.raises(QueryError):
        parse_query(raw)


def answer(store: MetadataStore, path: str, raw_query: str = "") -> tuple[int, str]:
    result = answer_metadata(store, path, parse_query(raw_query), threading.Event())
    return result.status, result.body.decode()


def test_list_value_in_text_is_one_item_per_line() -> None:
    store = MetadataStore()
    store.set("instance/attributes/hosts", ["a", "b"])
    assert answer(store, "instance/attributes/hosts") == (200, "a\nb")
    assert answer(store, "instance/attributes/hosts", "alt=json") == (200, '["a", "b"]')


def test_booleans_and_numbers_in_the_text_form() -> None:
    store = MetadataStore()
    store.set("instance/upcoming-maintenance", {"can_reschedule": True, "n": 3, "reasons": ["X"]})
    assert answer(store, "instance/upcoming-maintenance") == (200, 'can_reschedule true\nn 3\nreasons ["X"]')


def test_offsets_other_than_z_are_kept() -> None:
    store = MetadataStore()
    store.set("instance/upcoming-maintenance", {"window_start_time": "2024-07-29T14:19:53.5-07:00"})
    assert (
        answer(store, "instance/upcoming-maintenance")[1] == "window_start_time 2024-07-29T14:19:53.5-07:00"
    )


def test_directory_as_json_list() -> None:
    store = MetadataStore()
    status, body = answer(store, "instance/scheduling/", "alt=json")
    assert (status, json.loads(body)) == (200, ["automatic-restart", "on-host-maintenance", "preemptible"])


def test_wait_for_change_timeout_zero_answers_at_once() -> None:
    store = MetadataStore()
    assert answer(store, "instance/preempted", "wait_for_change=true&timeout_sec=0") == (200, "FALSE")


def test_wait_on_a_missing_key_is_404_at_once() -> None:
    assert answer(MetadataStore(), "instance/nothing", "wait_for_change=true")[0] == 404


def test_stopped_wait_is_503() -> None:
    store, stop = MetadataStore(), threading.Event()
    stop.set()
    result = answer_metadata(store, "instance/preempted", parse_query("wait_for_change=true"), stop)
    assert (result.status, result.note) == (503, "stopped")


# --- above /computeMetadata/v1/ and the service accounts -------------------------------------------------
def test_the_root_and_compute_metadata_list_what_is_under_them() -> None:
    root, listing = answer_above_v1("/"), answer_above_v1("/computeMetadata/")
    assert root is not None
    assert (root.status, root.body) == (200, b"computeMetadata/\n")
    assert listing is not None
    assert (listing.status, listing.body) == (200, b"v1/\n")
    for bare in ("/computeMetadata", "/computeMetadata/v1"):
        moved = answer_above_v1(bare)
        assert moved is not None
        assert moved.status == 301
        assert dict(moved.headers)["Location"] == bare + "/"
    assert answer_above_v1("/computeMetadata/v2/") is None
    assert answer_above_v1("/favicon.ico") is None


ACCOUNT = "instance/service-accounts/default/"


def test_a_token_is_json_by_default_in_the_real_shape_and_obviously_fake() -> None:
    result = answer_metadata(MetadataStore(), ACCOUNT + "token", Query(), threading.Event())
    assert result.content_type == "application/json"
    token = json.loads(result.body)
    assert set(token) == {"access_token", "expires_in", "token_type"}
    assert token["token_type"] == "Bearer"  # noqa: S105 - the token type, no secret
    assert token["expires_in"] > 0
    assert "fake" in token["access_token"]
    assert "not-a-secret" in token["access_token"]


def test_a_recursive_account_has_its_facts_and_never_its_token() -> None:
    status, body = answer(MetadataStore(), ACCOUNT, "recursive=true")
    assert status == 200
    info = json.loads(body)
    assert info == {"aliases": ["default"], "email": DEFAULT_EMAIL, "scopes": list(DEFAULT_SCOPES)}
    assert answer(MetadataStore(), ACCOUNT)[1].splitlines() == ["aliases", "email", "scopes", "token"]


def test_accounts_are_keyed_by_name_and_email_never_camel_cased() -> None:
    accounts = json.loads(answer(MetadataStore(), "instance/service-accounts/", "recursive=true")[1])
    assert "-" in DEFAULT_EMAIL  # camelCase would have rewritten it
    assert sorted(accounts) == sorted(["default", DEFAULT_EMAIL])
    assert accounts["default"] == accounts[DEFAULT_EMAIL]
    instance = json.loads(answer(MetadataStore(), "instance/", "recursive=true")[1])
    assert sorted(instance["serviceAccounts"]) == sorted(["default", DEFAULT_EMAIL])
    assert "token" not in json.dumps(instance)
