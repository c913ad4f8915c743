"""Where the daemon's log lines go: the journal with structured fields under systemd, stderr otherwise, as
text or (`log_format = "json"`) one JSON object per line with Cloud Logging's `time`, `severity` and
`message`, the message's `kind` and the same fields the journal gets (lower case, without the prefix).

Key messages carry a stable MESSAGE_ID so an SRE can `journalctl MESSAGE_ID=...` across a fleet, and fields
such as TPU_WATCHDOG_EVENT, TPU_WATCHDOG_STATE, TPU_WATCHDOG_OUTCOME, TPU_WATCHDOG_PID and
TPU_WATCHDOG_PROCESS. Pass them with `fields(...)` as the `extra=` of a logging call.

The daemon's lines are written by a thread of their own (`LogWriter`): a journal that stalls or a stderr
pipe nobody reads blocks that thread only, never the loop or a drain about to signal.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import sys
import threading
from collections.abc import Callable, Mapping

from watchdog.core.clock import utc_time
from watchdog.core.text import valid_text
from watchdog.core.workload import Workload

# Stable identifiers of the key messages (never change them: dashboards and alerts filter on them).
MESSAGE_IDS = {
    "event_started": "a0e0722fa0d844358ed27717656a7449",
    "event_cleared": "5fa14623ad8a49c88f5a2df3e273799e",
    "drain_started": "4ea1ef3afc184d809a57041d8783efed",
    "signal_sent": "b64be2df8f894d9ba0b6c773d0a5e800",
    "drain_finished": "50c2f3944f004c4ebfa67f7ad0892fe6",
    "metadata_error": "7e36193ed2a74f6ab1e862481512dfd9",
    "state_recovered": "31abcf04de2f4c138ed545eb26e644fc",
    "daemon_started": "98ae34cc9a444eddb7d4c13f76fa4bdd",
    "state_not_persisted": "224f559d3b3c44c09e7f05dd57fe3272",
    "state_persisted": "b4e9931f8d6f4c079e2b383f5d1d32c8",
    "late_arrival": "3c6f0a52d8e44f0f9b1e7d2a4c5b8e91",
    "holder_not_ready": "ca582390292247d68f8a5c2135829d73",
    "holder_left": "c7620e0b012d4749b460de9ead080388",
    "drain_progress": "5765ed76ad2a4fc7b428fcb4f6d6fd54",
    "no_devices": "61ea0f33f61547908d1f107a91f91b56",
}
PREFIX = "TPU_WATCHDOG_"
KIND = "tpu_watchdog_kind"  # lower case: the JSON lines' `kind`, never a journal field

LEVELS = ("debug", "info", "warning", "error")


def fields(message: str | None = None, **values: object) -> dict[str, object]:
    """Journal fields for `extra=`: MESSAGE_ID from a key of MESSAGE_IDS, the rest as TPU_WATCHDOG_<NAME>."""
    extra: dict[str, object] = {f"{PREFIX}{name.upper()}": value for name, value in values.items()}
    if message is not None:
        extra["MESSAGE_ID"] = MESSAGE_IDS[message]
        extra[KIND] = message
    return extra


def workload_fields(workload: Workload | None) -> dict[str, str]:
    """For `fields()`: a process's workload in words (`workload`) and each of its known parts (`unit`,
    `pod_name`, ...): TPU_WATCHDOG_POD_NAME=trainer-0 in the journal, `pod_name` in a JSON line."""
    if workload is None:
        return {}
    known = {
        name: value for name, value in workload.to_dict().items() if value is not None and name != "kind"
    }
    words = workload.describe()
    return {"workload": words, **known} if words else {}


class JsonLines(logging.Formatter):
    """One JSON object per line: what Cloud Logging's agents parse (time, severity, message) plus `kind`
    and the journal's fields. A value that cannot be JSON is written as its text."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": utc_time(record.created, "microseconds"),
            "severity": "CRITICAL" if record.levelno >= logging.CRITICAL else record.levelname,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key.startswith(PREFIX):
                line.setdefault(key[len(PREFIX) :].lower(), value)  # never over time, severity or message
        kind = record.__dict__.get(KIND)
        if kind:
            line["kind"] = kind
            line["message_id"] = record.__dict__.get("MESSAGE_ID")
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:  # formatted where it was logged (`LogWriter`)
            line["exception"] = record.exc_text
        return json.dumps(line, default=str, ensure_ascii=False)


class UtcText(logging.Formatter):
    """`2026-12-01T13:45:01.123Z WARNING message`: UTC, with the zone said."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 - stdlib name
        return utc_time(record.created, "milliseconds")


def under_systemd(environ: Mapping[str, str]) -> bool:
    """systemd sets JOURNAL_STREAM for a service whose stderr goes to the journal."""
    return bool(environ.get("JOURNAL_STREAM") or environ.get("INVOCATION_ID"))


LOG_QUEUE = 10_000  # lines a stuck log stream may hold back before newer ones are dropped (and counted)


class LogWriter(logging.Handler):
    """Takes each record in the thread that logs and hands it to `target` in a thread of its own, so a
    stuck journal or a full stderr pipe never holds that thread up. The record is made self-contained first
    (its message and traceback as text: the objects named may change once the caller goes on). Bounded:
    with LOG_QUEUE lines waiting, a new one is dropped and `on_drop()` called (the daemon counts it in
    `tpu_watchdog_output_errors_total{output="log"}`); once the stream moves again one line says how many."""

    def __init__(self, target: logging.Handler, size: int = LOG_QUEUE) -> None:
        super().__init__()
        self.target = target
        self.on_drop: Callable[[], None] = lambda: None
        self.dropped = 0  # since the daemon started
        self._unsaid = 0  # dropped since the last line that said so
        self._queue: queue.Queue[logging.LogRecord] = queue.Queue(size)
        self._thread = threading.Thread(target=self._write, name="log-writer", daemon=True)
        self._thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            record.msg, record.args = valid_text(record.getMessage()), None
            if record.exc_info:
                record.exc_text = valid_text(logging.Formatter().formatException(record.exc_info))
                record.exc_info = None
            for key, value in list(record.__dict__.items()):
                if key.isupper() and isinstance(value, str):  # a journal field (a process's name)
                    record.__dict__[key] = valid_text(value)
            self._queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1
            self._unsaid += 1
            self.on_drop()
        except Exception:  # noqa: BLE001 - a line that cannot be made must not raise into the caller
            self.dropped += 1
            self.on_drop()

    def flush_within(self, timeout: float) -> bool:
        """Wait up to `timeout` s for the lines taken so far to be written (at exit); True if they were."""
        done = threading.Event()
        record = logging.LogRecord("tpu-watchdog", logging.DEBUG, "", 0, "", None, None)
        record.flushed = done
        try:
            self._queue.put(record, timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    def _write(self) -> None:
        while True:  # a daemon thread: it ends with the process
            record = self._queue.get()
            flushed = record.__dict__.get("flushed")
            if flushed is not None:
                flushed.set()
                continue
            if self._unsaid:
                said, self._unsaid = self._unsaid, 0
                note = logging.LogRecord(
                    "tpu-watchdog", logging.ERROR, "", 0,
                    "%d log line(s) dropped while the log stream was stuck", (said,), None,
                )  # fmt: skip
                self.target.handle(note)
            self.target.handle(record)  # its own handleError: nothing raises here


def setup_logging(
    level: str = "info",
    environ: Mapping[str, str] | None = None,
    log_format: str = "text",
    *,
    background: bool = False,
) -> LogWriter | None:
    """Under systemd, the journal (whatever `log_format` says: its fields are structured already).
    `background` (the daemon): written by a `LogWriter`, returned."""
    env = os.environ if environ is None else environ
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    handler: logging.Handler
    if under_systemd(env):
        handler = _journal_handler()
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        json_lines = log_format == "json"
        handler.setFormatter(JsonLines() if json_lines else UtcText("%(asctime)s %(levelname)s %(message)s"))
    writer = LogWriter(handler) if background else None
    root.addHandler(writer or handler)
    root.setLevel(level.upper())
    # urllib3 logs every retry and connection at DEBUG/WARNING; the watcher reports what matters itself.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    return writer


def _journal_handler() -> logging.Handler:
    """systemd's JournalHandler, sending only journal fields: its emit() also sends every LogRecord
    attribute (msg=, args=, levelname= ...) as a lower-case field, which journald drops: wasted bytes."""
    from systemd.journal import JournalHandler

    class FieldsOnly(JournalHandler):  # type: ignore[misc]
        def emit(self, record: logging.LogRecord) -> None:
            try:
                extra = {k: _journal_value(v) for k, v in record.__dict__.items() if k.isupper()}
                self.send(
                    self.format(record),
                    PRIORITY=format(self.map_priority(record.levelno)),
                    LOGGER=record.name,
                    THREAD_NAME=record.threadName,
                    CODE_FILE=record.pathname,
                    CODE_LINE=record.lineno,
                    CODE_FUNC=record.funcName,
                    SYSLOG_IDENTIFIER="tpu-watchdog",
                    **extra,
                )
            except Exception:  # noqa: BLE001 - logging must never take the daemon down
                self.handleError(record)

    handler: logging.Handler = FieldsOnly(SYSLOG_IDENTIFIER="tpu-watchdog")
    return handler


def _journal_value(value: object) -> object:
    """A list (event ids) as one space-separated field value; journald fields are flat strings."""
    return " ".join(str(v) for v in value) if isinstance(value, (list, tuple)) else value
