"""The store: values, content ETags, and hanging waits that wake on change, timeout, stop or a lost client."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from tests.support.waiting import wait_for
from watchdog.fake.store import (
    DEFAULTS,
    NO_NOTIFICATIONS,
    Directory,
    Leaf,
    MetadataStore,
    WaitResult,
    normalize_key,
    parse_value,
)
from watchdog.fake.vm_identity import GpuIdentity, TpuIdentity

ME = "instance/maintenance-event"


def leaf(store: MetadataStore, key: str) -> Leaf:
    snapshot = store.lookup(key)
    assert isinstance(snapshot, Leaf)
    return snapshot


def test_defaults_are_served() -> None:
    store = MetadataStore()
    assert leaf(store, ME).value.content == "NONE"
    upcoming = leaf(store, "instance/upcoming-maintenance").value
    assert (upcoming.status, upcoming.content) == (503, NO_NOTIFICATIONS)
    assert store.lookup("instance/nothing") is None


def test_a_gpu_identity_replaces_a_tpu_one_whole_and_back() -> None:
    store = MetadataStore()
    changed = store.set_identity(GpuIdentity())
    assert "instance/attributes/tpu-env" in changed
    assert "instance/machine-type" in changed
    assert store.lookup("instance/attributes/") is None  # a GPU VM has no TPU attributes
    assert leaf(store, "instance/machine-type").value.content.endswith("/machineTypes/a3-highgpu-8g")
    assert leaf(store, "instance/scheduling/on-host-maintenance").value.content == "TERMINATE"
    assert leaf(store, ME).value.content == "NONE"  # what is not identity stays
    assert store.set_identity(GpuIdentity()) == []
    store.set_identity(TpuIdentity(node="back"))
    assert "NODE_ID: 'back'" in str(leaf(store, "instance/attributes/tpu-env").value.content)
    assert leaf(store, "instance/machine-type").value.content.endswith("/machineTypes/ct4p-hightpu-4t")


def test_etag_follows_content_only() -> None:
    store = MetadataStore()
    first = leaf(store, ME).etag
    assert first != "0"
    assert store.set(ME, "NONE") is False
    assert leaf(store, ME).etag == first
    assert store.set(ME, "TERMINATE_ON_HOST_MAINTENANCE") is True
    assert leaf(store, ME).etag != first
    store.set(ME, "NONE")
    assert leaf(store, ME).etag == first  # same content, same ETag


def test_status_is_part_of_the_content() -> None:
    store = MetadataStore()
    before = leaf(store, "instance/upcoming-maintenance").etag
    assert store.set("instance/upcoming-maintenance", NO_NOTIFICATIONS, status=200) is True
    assert leaf(store, "instance/upcoming-maintenance").etag != before


def test_directory_snapshot_lists_children_and_changes_with_them() -> None:
    store = MetadataStore()
    directory = store.lookup("instance/scheduling")
    assert isinstance(directory, Directory)
    assert directory.children == ("automatic-restart", "on-host-maintenance", "preemptible")
    store.set("instance/scheduling/preemptible", "TRUE")
    after = store.lookup("instance/scheduling/")
    assert isinstance(after, Directory)
    assert after.etag != directory.etag
    root = store.lookup("")
    assert isinstance(root, Directory)
    assert root.children == ("instance/", "project/", "universe/")


def test_set_refuses_directories_and_children_of_values() -> None:
    store = MetadataStore()
    with pytest.raises(ValueError, match="directory"):
        store.set("instance/attributes", "x")
    with pytest.raises(ValueError, match="is a value"):
        store.set(f"{ME}/child", "x")
    with pytest.raises(TypeError):
        store.set(ME, 5)  # type: ignore[arg-type]


def test_reset_and_delete() -> None:
    store = MetadataStore()
    store.set(ME, "TERMINATE_ON_HOST_MAINTENANCE")
    store.set("instance/attributes/extra", "x")
    store.delete("instance/preempted")
    assert store.lookup("instance/preempted") is None
    with pytest.raises(KeyError):
        store.delete("instance/preempted")
    assert store.reset("instance/attributes") is True  # a key without default goes away
    assert store.lookup("instance/attributes/extra") is None
    assert leaf(store, ME).value.content == "TERMINATE_ON_HOST_MAINTENANCE"
    assert store.reset() is True
    assert {k: leaf(store, k).value for k in DEFAULTS} == dict(DEFAULTS)
    assert store.reset() is False


@pytest.mark.parametrize("bad", ["instance/../x", "instance//x", "instance/ x", "instance/x?y", "a/./b"])
def test_bad_keys_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid metadata key"):
        normalize_key(bad)


def test_parse_value_reads_json_for_json_keys() -> None:
    assert parse_value(ME, b"TRUE") == "TRUE"
    assert parse_value(ME, b'{"a": 1}') == '{"a": 1}'  # text keys keep text
    assert parse_value(ME, b'{"a": 1}', "application/json") == {"a": 1}
    assert parse_value("instance/upcoming-maintenance", b'{"type": "SCHEDULED"}') == {"type": "SCHEDULED"}
    with pytest.raises(ValueError, match="must be JSON"):
        parse_value("instance/upcoming-maintenance", b"SCHEDULED")
    with pytest.raises(ValueError, match="UTF-8"):
        parse_value(ME, b"\xff")


class Waiter:
    def __init__(
        self,
        store: MetadataStore,
        stop: threading.Event,
        abandoned: Callable[[], bool] | None = None,
        check_every: float = 1.0,
    ) -> None:
        self.result: WaitResult | None = None

        def wait() -> None:
            self.result = store.wait_for_change(ME, None, 30.0, stop, abandoned, check_every)

        self.thread = threading.Thread(target=wait)
        self.thread.start()

    def outcome(self) -> WaitResult:
        self.thread.join(10)
        assert self.result is not None
        return self.result


def test_wait_returns_on_change() -> None:
    store, stop = MetadataStore(), threading.Event()
    waiter = Waiter(store, stop)
    wait_for(lambda: store.waiting() == 1, what="the waiter")
    store.set(ME, "MIGRATE_ON_HOST_MAINTENANCE")
    result = waiter.outcome()
    assert result.outcome == "changed"
    assert isinstance(result.snapshot, Leaf)
    assert result.snapshot.value.content == "MIGRATE_ON_HOST_MAINTENANCE"
    assert store.waiting() == 0


def test_wait_with_a_stale_etag_returns_at_once() -> None:
    store = MetadataStore()
    result = store.wait_for_change(ME, "0", 30.0, threading.Event())
    assert result.outcome == "changed"


def test_wait_times_out_with_the_current_value() -> None:
    store = MetadataStore()
    result = store.wait_for_change(ME, leaf(store, ME).etag, 0.05, threading.Event())
    assert result.outcome == "timeout"
    assert result.snapshot == store.lookup(ME)


def test_stop_wakes_every_waiter() -> None:
    store, stop = MetadataStore(), threading.Event()
    waiters = [Waiter(store, stop) for _ in range(5)]
    wait_for(lambda: store.waiting() == 5, what="5 waiters")
    stop.set()
    store.wake_all()
    assert [w.outcome().outcome for w in waiters] == ["stopped"] * 5


def test_expire_ends_the_waits_in_progress_as_timeouts_and_later_ones_hang() -> None:
    store, stop = MetadataStore(), threading.Event()
    waiters = [Waiter(store, stop) for _ in range(3)]  # each would hang 30 s
    wait_for(lambda: store.waiting() == 3, what="3 waiters")
    store.expire_waits()
    assert [w.outcome() for w in waiters] == [WaitResult(store.lookup(ME), "timeout")] * 3
    later = Waiter(store, stop)  # begun after the expiry: hangs until something happens
    wait_for(lambda: store.waiting() == 1, what="a new waiter")
    assert later.thread.is_alive()
    store.set(ME, "MIGRATE_ON_HOST_MAINTENANCE")
    assert later.outcome().outcome == "changed"


def test_an_abandoned_wait_ends() -> None:
    store, stop = MetadataStore(), threading.Event()
    gone = threading.Event()
    waiter = Waiter(store, stop, abandoned=gone.is_set, check_every=0.01)
    wait_for(lambda: store.waiting() == 1, what="the waiter")
    gone.set()
    assert waiter.outcome().outcome == "abandoned"


def test_deleting_the_key_ends_the_wait_with_no_snapshot() -> None:
    store, stop = MetadataStore(), threading.Event()
    waiter = Waiter(store, stop)
    wait_for(lambda: store.waiting() == 1, what="the waiter")
    store.delete(ME)
    assert waiter.outcome() == WaitResult(None, "changed")
