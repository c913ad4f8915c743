"""Faults: validation (from code and from JSON) and the book that hands them out N times per path."""

from __future__ import annotations

import pytest

from watchdog.fake.faults import Fault, FaultBook


def test_defaults() -> None:
    fault = Fault(kind="status")
    assert (fault.count, fault.status, fault.seconds, fault.path) == (1, 503, 2.0, None)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kind": "explode"}, "unknown fault kind"),
        ({"kind": "status", "count": 0}, "count"),
        ({"kind": "status", "count": True}, "count"),
        ({"kind": "status", "status": 99}, "status"),
        ({"kind": "delay", "seconds": -1}, "seconds"),
        ({"kind": "delay", "seconds": float("nan")}, "seconds"),
        ({"kind": "status", "path": "a/../b"}, "invalid metadata key"),
    ],
)
def test_invalid_faults_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Fault.from_json(fields)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([1, 2], "JSON object"),
        ({"count": 2}, "needs a kind"),
        ({"kind": "status", "colour": "red"}, "unknown fault field"),
        ({"kind": "status", "path": 5}, "path must be a string"),
    ],
)
def test_bad_json_is_refused(document: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Fault.from_json(document)


def test_json_round_trip() -> None:
    fault = Fault(kind="delay", count=3, seconds=0.5, path="/instance/preempted/")
    assert fault.path == "instance/preempted"
    assert Fault.from_json(fault.to_json()) == fault


def test_book_spends_counts_in_order_and_by_path() -> None:
    book = FaultBook()
    book.add(Fault(kind="status", status=500, count=2, path="instance/preempted"))
    book.add(Fault(kind="reset"))
    taken = book.take("instance/maintenance-event")
    assert taken is not None
    assert taken.kind == "reset"
    assert book.take("instance/maintenance-event") is None
    first, second = book.take("/instance/preempted"), book.take("instance/preempted")
    assert first is not None
    assert second is not None
    assert first.status == second.status == 500
    assert book.take("instance/preempted") is None
    assert book.pending() == []


def test_book_clear_and_bad_paths() -> None:
    book = FaultBook()
    book.add(Fault(kind="garbage", count=5))
    assert book.take("a/../b") is None  # a path no key can have never takes a fault
    assert book.pending()[0].count == 5
    book.clear()
    assert book.take("instance/id") is None
