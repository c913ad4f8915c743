"""The fake's request log: a bounded ring (the oldest go first), read back as a copy, cleared on demand,
safe to add to from the server's many handler threads; each record's JSON form is what /_fake/requests
serves."""

from __future__ import annotations

import json
import threading

from watchdog.fake.requestlog import DEFAULT_CAPACITY, RequestLog, RequestRecord


def record(n: int, status: int = 200) -> RequestRecord:
    return RequestRecord(float(n), "GET", "/computeMetadata/v1/instance/preempted", f"n={n}", True, status)


def test_records_come_back_in_arrival_order_and_the_ring_drops_the_oldest() -> None:
    log = RequestLog(capacity=3)
    for n in range(5):
        log.add(record(n))
    assert [r.query for r in log.records()] == ["n=2", "n=3", "n=4"]


def test_records_are_a_copy_and_clear_empties_the_log() -> None:
    log = RequestLog()
    for n in range(DEFAULT_CAPACITY + 1):
        log.add(record(n))
    assert len(log.records()) == DEFAULT_CAPACITY  # bounded by default too: a long-running fake stays small
    log.clear()
    log.add(record(1))
    seen = log.records()
    seen.clear()
    assert len(log.records()) == 1  # the caller's list is its own
    log.clear()
    assert log.records() == []
    log.add(record(2))
    assert [r.query for r in log.records()] == ["n=2"]


def test_adds_from_many_threads_are_all_kept() -> None:
    log = RequestLog(capacity=8 * 500)
    start = threading.Barrier(8)

    def handler(worker: int) -> None:
        start.wait()
        for n in range(500):
            log.add(record(worker * 1000 + n))

    threads = [threading.Thread(target=handler, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    queries = [r.query for r in log.records()]
    assert len(queries) == len(set(queries)) == 8 * 500


def test_the_json_form_has_every_field_and_round_trips() -> None:
    path = "/computeMetadata/v1/instance/maintenance-event"
    reset = RequestRecord(12.5, "GET", path, "wait_for_change=true", False, 0, "fault:reset", 14.0)
    form = reset.to_json()
    assert form == {
        "time": 12.5,
        "method": "GET",
        "path": path,
        "query": "wait_for_change=true",
        "flavor_present": False,
        "status": 0,  # no HTTP answer was sent
        "note": "fault:reset",
        "answered": 14.0,  # when the answer (here: the reset) went out
        "value": "",  # nothing served
    }
    assert RequestRecord(**json.loads(json.dumps(form))) == reset
    assert record(1).note == ""  # nothing to explain for a plain answer


def test_a_record_told_its_answer_went_out_later_says_so() -> None:
    """A trickled body goes out long after its record was logged: the record is told when it was done."""
    log = RequestLog(capacity=3)
    first, second = record(1), record(2)
    log.add(first)
    log.add(second)
    log.answered(first, 9.5)
    assert [r.answered for r in log.records()] == [9.5, None]
    log.answered(record(3), 1.0)  # not in the log (dropped from the ring, say): nothing changes
    assert [r.answered for r in log.records()] == [9.5, None]
