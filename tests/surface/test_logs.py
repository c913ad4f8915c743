"""Log destinations and the journal fields of key messages."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

from watchdog.surface.logs import MESSAGE_IDS, JsonLines, fields, under_systemd


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
