"""The journal fields for real: python-systemd's JournalHandler, as set up by `setup_logging` under systemd,
sends its native-protocol datagram to /run/systemd/journal/socket. In a private mount namespace a tmpfs hides
the host's /run/systemd and our own AF_UNIX datagram socket takes journald's place, so the test reads exactly
what journald would store (no journald needed, nothing changed outside the namespace)."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from watchdog.surface.logs import MESSAGE_IDS

REPO = Path(__file__).resolve().parents[2]

# Runs inside the namespace: binds journald's socket, logs two messages through setup_logging's handler,
# prints the datagrams received (hex) as JSON.
RECEIVER = r"""
import json, logging, os, socket, sys
os.makedirs("/run/systemd/journal")
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind("/run/systemd/journal/socket")
sock.settimeout(10)
from watchdog.surface.logs import fields, setup_logging
setup_logging("info", {"JOURNAL_STREAM": "1:1"})
log = logging.getLogger("tpu-watchdog")
sent = fields("signal_sent", pid=42, process="python3")
log.warning("SIGTERM to pid %d (%s): sent", 42, "python3", extra=sent)
log.info("drain finished\n  pid 42 exited 0", extra=fields("drain_finished", outcome="exited"))
log.debug("below the level: never sent")
got = [sock.recv(1 << 20).hex() for _ in range(2)]
sock.settimeout(0.2)
try:
    got.append(sock.recv(1 << 20).hex())
except TimeoutError:
    pass
except socket.timeout:  # Python 3.10: not yet an alias of TimeoutError
    pass
sock.close()
sys.stdout.write(json.dumps(got))
"""


def parse_native(datagram: bytes) -> dict[str, str]:
    """journald's native protocol: `KEY=value\\n`, or for a value that may hold a newline
    `KEY\\n` + 64-bit little-endian length + value + `\\n`."""
    entry: dict[str, str] = {}
    at = 0
    while at < len(datagram):
        line_end = datagram.index(b"\n", at)
        line = datagram[at:line_end]
        if b"=" in line:
            key, _, value = line.partition(b"=")
            at = line_end + 1
        else:
            key = line
            (size,) = struct.unpack_from("<Q", datagram, line_end + 1)
            start = line_end + 1 + 8
            value = datagram[start : start + size]
            assert datagram[start + size : start + size + 1] == b"\n", "binary field not ended by a newline"
            at = start + size + 1
        entry[key.decode()] = value.decode()
    return entry


def test_parse_native_reads_both_field_forms() -> None:
    datagram = b"A=1\nMESSAGE\n" + struct.pack("<Q", 7) + b"two\nrow\nB=x=y\n"
    assert parse_native(datagram) == {"A": "1", "MESSAGE": "two\nrow", "B": "x=y"}


def receive_in_namespace() -> list[dict[str, str]]:
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True, timeout=10, check=False)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a mount namespace here (root needed): {probe.stderr.decode().strip()}")
    script = 'mount -t tmpfs -o mode=0755 tmpfs /run/systemd && exec "$0" -c "$1"'
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, sys.executable, RECEIVER],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [parse_native(bytes.fromhex(d)) for d in json.loads(done.stdout)]


def test_journal_fields_of_a_key_message() -> None:
    entries = receive_in_namespace()
    assert len(entries) == 2, f"expected 2 datagrams (debug is below the level), got {len(entries)}"
    signal_sent, drain_finished = entries
    assert signal_sent["MESSAGE"] == "SIGTERM to pid 42 (python3): sent"
    assert signal_sent["MESSAGE_ID"] == MESSAGE_IDS["signal_sent"]
    assert signal_sent["PRIORITY"] == "4"  # warning
    assert signal_sent["TPU_WATCHDOG_PID"] == "42"
    assert signal_sent["TPU_WATCHDOG_PROCESS"] == "python3"
    assert signal_sent["SYSLOG_IDENTIFIER"] == "tpu-watchdog"

    # A multi-line message arrives whole (binary length-prefixed form), with its own id and level.
    assert drain_finished["MESSAGE"] == "drain finished\n  pid 42 exited 0"
    assert drain_finished["MESSAGE_ID"] == MESSAGE_IDS["drain_finished"]
    assert drain_finished["PRIORITY"] == "6"  # info
    assert drain_finished["TPU_WATCHDOG_OUTCOME"] == "exited"
    assert drain_finished["SYSLOG_IDENTIFIER"] == "tpu-watchdog"
    assert "TPU_WATCHDOG_PID" not in drain_finished
    # Only journal fields go out: not the LogRecord's own attributes as lower-case names.
    assert [name for entry in entries for name in entry if not name.isupper()] == []
