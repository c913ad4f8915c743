"""The HTTP side of the fake: a threaded HTTP/1.1 server and a thin handler over the store, the fault book
and the request log. Protocol rules live in answer.py, the control API in control.py.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import select
import socket
import socketserver
import threading
import time
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from watchdog.fake.answer import (
    METADATA_ROOT,
    Answer,
    Query,
    QueryError,
    answer_above_v1,
    answer_metadata,
    error,
    parse_query,
)
from watchdog.fake.control import MAX_BODY, PREFIX, ControlRequest, handle_control
from watchdog.fake.faults import GARBAGE, FaultBook
from watchdog.fake.listen import ListenAddress
from watchdog.fake.requestlog import VALUE_LIMIT, RequestLog, RequestRecord
from watchdog.fake.store import MetadataStore

log = logging.getLogger("watchdog.fake")


@dataclass(frozen=True)
class Backend:
    """What the handlers serve from, and the stop event that ends their waits."""

    store: MetadataStore
    faults: FaultBook
    log: RequestLog
    stop: threading.Event


class MetadataHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog is 5: a burst of clients (a fleet rehearsal, hundreds of hanging GETs)
    # would see dropped SYNs and retry after 1, 3, 7 s. The real server takes them all at once.
    request_queue_size = 1024

    def __init__(self, listen: ListenAddress, backend: Backend) -> None:
        self.backend = backend
        self.address_family = listen.family
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        self._busy = 0
        self._busy_changed = threading.Condition()
        super().__init__((listen.bind_host, listen.port), _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind would resolve our own name (getfqdn): a DNS wait for nothing.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def busy(self, delta: int) -> None:
        """Count requests being answered (+1 when one starts, -1 when it is done)."""
        with self._busy_changed:
            self._busy += delta
            if self._busy == 0:
                self._busy_changed.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no request is being answered; False when `timeout` passed first."""
        with self._busy_changed:
            return self._busy_changed.wait_for(lambda: self._busy == 0, timeout)

    def wake(self) -> None:
        """Make serve_forever's select return now: connect to ourselves (the connection is never served
        when shutdown() has asked the loop to stop; otherwise its handler just sees an empty request)."""
        with contextlib.suppress(OSError), socket.socket(self.address_family, socket.SOCK_STREAM) as poke:
            poke.settimeout(1.0)
            poke.connect(self.server_address[:2])

    def close_connections(self) -> None:
        """Shut every open connection, so handlers idle on keep-alive reads finish at once."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):  # already closed by its handler
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection from %s ended with an error", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: MetadataHTTPServer

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes: without NODELAY, Nagle plus delayed ACKs add 40 ms.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def version_string(self) -> str:
        return "Metadata Server for VM"

    def do_GET(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _dispatch(self) -> None:
        self.server.busy(+1)
        try:
            self._dispatch_one()
        except OSError:  # the client went away mid-answer, or stop() closed the connection
            log.debug("connection lost answering %s %s", self.command, self.path, exc_info=True)
            self.close_connection = True
        finally:
            self.server.busy(-1)

    def _dispatch_one(self) -> None:
        backend = self.server.backend
        try:
            url = urlsplit(self.path)
            body = self._read_body()
            if body is None:
                return
            if url.path.startswith(PREFIX):
                content_type = self.headers.get("Content-Type", "")
                control = ControlRequest(self.command, url.path, url.query, body, content_type)
                self._send(handle_control(control, backend.store, backend.faults, backend.log))
            elif url.path.startswith(METADATA_ROOT):
                self._metadata(unquote(url.path[len(METADATA_ROOT) :]), url.query)
            else:
                self._above_v1(url.path, url.query)
        except OSError:
            raise
        except Exception:  # the fake answers 500 and keeps serving, as a server would
            log.exception("fake metadata server: error answering %s %s", self.command, self.path)
            self.close_connection = True
            self._send(error(500, "internal error in the fake metadata server"))

    def _read_body(self) -> bytes | None:
        """The request body (b"" without one); None after answering 411/413 to what we will not read."""
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            self._send(error(411, "send a Content-Length, not a chunked body"))
            return None
        length_text = self.headers.get("Content-Length", "0")
        if not length_text.isdigit() or int(length_text) > MAX_BODY:
            self.close_connection = True
            self._send(error(413, f"a body needs a Content-Length of at most {MAX_BODY} bytes"))
            return None
        return self.rfile.read(int(length_text))

    def _above_v1(self, path: str, raw_query: str) -> None:
        """The root and /computeMetadata/ (logged with their absolute path); 404 for any other path. The
        root answers without a flavor header, as the real one does."""
        listing = answer_above_v1(path)
        if listing is None:
            self._send(error(404, "Not Found"))
            return
        answer = self._refusal(flavor_required=path != "/") or listing
        flavor_present = self.headers.get("Metadata-Flavor") is not None
        record = RequestRecord(time.time(), self.command, path, raw_query, flavor_present, answer.status)
        self.server.backend.log.add(record)
        self._send(answer)

    def _refusal(self, flavor_required: bool = True) -> Answer | None:
        """The answer the real server gives a request it refuses (403, 405); None for one it serves."""
        if self.headers.get("X-Forwarded-For") is not None:
            return error(403, "Request had an X-Forwarded-For header and was rejected.")
        if flavor_required and self.headers.get("Metadata-Flavor") != "Google":
            return error(403, "Missing Metadata-Flavor:Google header.")
        if self.command != "GET":
            return replace(error(405, "Method Not Allowed"), headers=(("Allow", "GET"),))
        return None

    def _metadata(self, path: str, raw_query: str) -> None:
        backend = self.server.backend
        arrived = time.time()
        flavor_present = self.headers.get("Metadata-Flavor") is not None
        answer, flavor, trickle = self._metadata_answer(path, raw_query)
        if answer is None:
            status, note = 0, "fault:reset"
        elif answer.note == "abandoned":
            status, note = 0, "abandoned"
        else:
            status, note = answer.status, answer.note
        # Logged before the answer goes out: a client that has its answer finds the record there.
        value = answer.body[:VALUE_LIMIT].decode(errors="replace") if answer and status == 200 else ""
        answered = time.time() + trickle
        record = RequestRecord(
            arrived, self.command, path, raw_query, flavor_present, status, note, answered, value
        )
        backend.log.add(record)
        if answer is None:  # the connection is to be dropped without a word
            self._drop()
        elif answer.note == "abandoned":
            self.close_connection = True
        else:
            self._send(answer, flavor=flavor, trickle=trickle)
            if trickle > 0:  # its last byte went out only now, however late the drip ran
                backend.log.answered(record, time.time())

    def _metadata_answer(self, path: str, raw_query: str) -> tuple[Answer | None, bool, float]:
        """The answer (None: reset the connection), whether it carries the flavor header, and over how
        many seconds its body is to trickle out (0: at once)."""
        backend = self.server.backend
        refusal = self._refusal()
        if refusal is not None:
            return refusal, True, 0
        try:
            query = parse_query(raw_query)
        except QueryError as exc:
            return error(400, str(exc)), True, 0
        fault = backend.faults.take(path)
        if fault is None:
            return answer_metadata(backend.store, path, query, backend.stop, self._client_gone), True, 0
        note = f"fault:{fault.kind}"
        if fault.kind == "reset":
            return None, True, 0
        if fault.kind == "status":
            return error(fault.status, f"injected fault: HTTP {fault.status}", note=note), True, 0
        if fault.kind == "delay" and backend.stop.wait(fault.seconds):
            return error(503, "the fake metadata server is stopping", note="stopped"), True, 0
        if fault.kind in ("garbage", "oversized", "etag"):
            now = answer_metadata(backend.store, path, Query(alt=query.alt), backend.stop)
            if fault.kind == "etag":  # at once, the same value, an ETag never seen before
                return replace(now, etag=secrets.token_hex(8), note=note), True, 0
            body = GARBAGE if fault.kind == "garbage" else _oversized(now.body, fault.size)
            return replace(now, status=200, body=body, note=note), True, 0
        answer = answer_metadata(backend.store, path, query, backend.stop, self._client_gone)
        trickle = fault.seconds if fault.kind == "trickle" else 0.0
        return replace(answer, note=note), fault.kind != "no_flavor", trickle

    def _client_gone(self) -> bool:
        """True when the client closed its end (a readable socket with nothing to read).

        poll, not select: select() refuses descriptors above 1023, which a busy fake (or the process of a
        fifty-host fleet test) reaches.
        """
        try:
            poller = select.poll()
            poller.register(self.connection, select.POLLIN)
            if not poller.poll(0):
                return False
            peeked: bytes = self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            return peeked == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def _drop(self) -> None:
        """Close with an RST (SO_LINGER 0), no response: what a crashing server looks like."""
        self.close_connection = True
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        self.connection.close()  # the real close (an RST) comes when the handler closes its files

    def _send(self, answer: Answer, flavor: bool = True, trickle: float = 0.0) -> None:
        if answer.note == "stopped":
            self.close_connection = True
        self.send_response(answer.status)
        if flavor:
            self.send_header("Metadata-Flavor", "Google")
        self.send_header("Content-Type", answer.content_type)
        if answer.etag is not None:
            self.send_header("ETag", answer.etag)
        for name, value in answer.headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer.body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        try:
            self.end_headers()
            if self.command != "HEAD":
                self._write_body(answer.body, trickle)
        except (BrokenPipeError, ConnectionResetError):
            # The client left (a watcher shutting its socket down on stop): nothing to answer, no error.
            self.close_connection = True
            log.debug("client %s left before its answer was sent", self.client_address)

    def _write_body(self, body: bytes, trickle: float) -> None:
        """The body at once, or (a trickle fault) a byte at a time spread evenly over `trickle` seconds."""
        if trickle <= 0 or not body:
            self.wfile.write(body)
            return
        self.wfile.flush()
        pause = trickle / len(body)
        for i in range(len(body)):
            if self.server.backend.stop.wait(pause):
                self.close_connection = True
                return
            self.wfile.write(body[i : i + 1])
            self.wfile.flush()


def _oversized(body: bytes, size: int) -> bytes:
    unit = body or b"X"
    return (unit * (size // len(unit) + 1))[:size]
