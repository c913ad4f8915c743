"""Log destinations and the journal fields of key messages."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading

from tests.support.waiting import wait_for
from watchdog.surface.logs import MESSAGE_IDS, JsonLines, LogWriter, fields, under_systemd


def test_fields_name_the_message_and_prefix_the_rest() -> None:
    extra = fields("signal_sent", pid=42, process="python3")
    assert extra == {
        "MESSAGE_ID": MESSAGE_IDS["signal_sent"],
        "TPU_WATCHDOG_PID": 42,
        "TPU_WATCHDOG_PROCESS": "python3",
        "tpu_watchdog_kind": "signal_sent",  # lower case: for JSON lines, never sent to the journal
    }


def test_message_ids_are_distinct_128_bit_ids() -> None:
    ids = list(MESSAGE_IDS.values())
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


def test_systemd_is_recognised_by_its_environment() -> None:
    assert under_systemd({"JOURNAL_STREAM": "8:1234"})
    assert under_systemd({"INVOCATION_ID": "abc"})
    assert not under_systemd({})


def test_outside_systemd_lines_go_to_stderr() -> None:
    code = (
        "import logging; from watchdog.surface.logs import setup_logging; setup_logging('info', {}); "
        "logging.getLogger('x').info('hello %s', 'world'); logging.getLogger('x').debug('hidden')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30, env={}
    )
    assert done.stdout == ""
    assert done.stderr.rstrip().endswith("INFO hello world")
    assert "hidden" not in done.stderr


def test_a_json_line_has_cloud_loggings_fields_and_the_journals() -> None:
    record = logging.LogRecord("tpu-watchdog", logging.ERROR, __file__, 1, "drain %s", ("timed_out",), None)
    record.__dict__.update(fields("drain_finished", outcome="timed_out", severity="never over the severity"))
    record.created = 1796142663.006
    line = json.loads(JsonLines().format(record))
    assert line == {
        "time": "2026-12-01T16:31:03.006000Z",
        "severity": "ERROR",
        "message": "drain timed_out",
        "outcome": "timed_out",
        "kind": "drain_finished",
        "message_id": MESSAGE_IDS["drain_finished"],
    }


class Stuck(logging.Handler):
    """A stream that takes nothing until released, then keeps what it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.released = threading.Event()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.released.wait()
        self.lines.append(record.getMessage() + (f"\n{record.exc_text}" if record.exc_text else ""))


def test_a_stuck_stream_holds_up_no_caller_and_drops_past_its_bound_counted() -> None:
    stuck = Stuck()
    writer = LogWriter(stuck, size=3)
    drops: list[int] = []
    writer.on_drop = lambda: drops.append(1)
    logger = logging.getLogger("tpu-watchdog.test-writer")
    logger.propagate = False
    logger.addHandler(writer)
    try:
        for i in range(10):  # the first is taken by the writer's thread, stuck in emit; 3 wait; the rest drop
            logger.warning("line %d", i)
        wait_for(lambda: writer.dropped >= 6, what="the lines past the bound, dropped")
        assert writer.dropped == len(drops)
        stuck.released.set()
        assert writer.flush_within(10)
    finally:
        logger.removeHandler(writer)
    kept = [line for line in stuck.lines if line.startswith("line ")]
    assert kept[0] == "line 0"
    assert len(kept) + writer.dropped == 10
    assert f"{writer.dropped} log line(s) dropped while the log stream was stuck" in stuck.lines


def test_a_line_is_made_where_it_is_logged_traceback_included() -> None:
    """The writer's thread writes it later: what the arguments named may have changed by then."""
    released = Stuck()
    released.released.set()
    writer = LogWriter(released)
    logger = logging.getLogger("tpu-watchdog.test-writer-2")
    logger.propagate = False
    logger.addHandler(writer)
    holders = ["a"]
    try:
        logger.warning("holders %s", holders)
        holders.append("b")
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("failed")
        assert writer.flush_within(10)
    finally:
        logger.removeHandler(writer)
    assert released.lines[0] == "holders ['a']"
    assert released.lines[1].startswith("failed\nTraceback")
    assert "ValueError: boom" in released.lines[1]


def test_a_json_line_keeps_a_traceback_made_where_it_was_logged() -> None:
    record = logging.LogRecord("tpu-watchdog", logging.ERROR, __file__, 1, "failed", None, None)
    record.exc_text = "Traceback (most recent call last):\nValueError: boom"
    assert json.loads(JsonLines().format(record))["exception"].endswith("ValueError: boom")


class Utf8Only(logging.Handler):
    """A stream that, as the journal does, sends each line and its fields as UTF-8 (and keeps the bytes)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[bytes] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.sent.append(record.getMessage().encode("utf-8"))
            self.sent.append(str(record.__dict__["TPU_WATCHDOG_PROCESS_NAME"]).encode("utf-8"))
        except UnicodeEncodeError:
            self.handleError(record)


def test_a_process_name_that_is_not_utf8_goes_out_escaped_not_lost() -> None:
    """psutil decodes such a name with surrogateescape: UTF-8 cannot carry it, and the line was lost."""
    stream = Utf8Only()
    writer = LogWriter(stream)
    logger = logging.getLogger("tpu-watchdog.test-writer-3")
    logger.propagate = False
    logger.addHandler(writer)
    name = b"tr\xffin".decode("utf-8", "surrogateescape")
    try:
        logger.warning("SIGTERM to pid 7 (%s): sent", name, extra={"TPU_WATCHDOG_PROCESS_NAME": name})
        assert writer.flush_within(10)
    finally:
        logger.removeHandler(writer)
    assert stream.sent == [b"SIGTERM to pid 7 (tr\\udcffin): sent", b"tr\\udcffin"]
