"""The daemon's one HTTP listener: /metrics, /livez, /healthz, /readyz, /status. Read-only by construction.

GET and HEAD only (anything else is 405 with an Allow header); no endpoint changes anything, so exposing it
to a Prometheus server is safe. /metrics and the probes are served to every client; /status (pids, process
names, devices) only to the networks in `status_allow` (loopback unless the site widens it), 403 for the
rest. The answers come from a `Surface` the daemon implements.

The listener reads request heads itself, under one deadline per head, and parses them strictly under fixed
limits (httphead.py), because http.server waits forever on a silent client, allows 64 KiB lines and 100
headers, and quotes the request back in its error pages. No response carries a byte of the request: error
bodies are fixed per status.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from watchdog.core.vocabulary import LOOPBACK_NETWORKS
from watchdog.surface.httphead import (
    HEAD_END,
    RequestError,
    check_limits,
    parse_head,
)

log = logging.getLogger(__name__)

CONNECTION_TIMEOUT = 10.0  # s for a whole request head, an idle keep-alive or a reply write (slowloris)
MAX_CONNECTIONS = 32  # handled at once; beyond it a connection is closed at accept, not given a thread
BIND_RETRY = 10.0  # s between attempts to bind a listen address that was taken or not this host's

_TEXT = "text/plain; charset=utf-8"
_ERRORS = {  # fixed bodies: nothing from the request is ever echoed back
    400: b"bad request\n",
    403: b"forbidden: /status is served only to the networks in http.status_allow (loopback by default)\n",
    404: b"not found\n",
    405: b"method not allowed: read-only endpoint\n",
    413: b"request bodies are refused: read-only endpoint\n",
    414: b"request line too long\n",
    431: b"request headers too large\n",
    500: b"internal error\n",
    505: b"HTTP version not supported\n",
}


class Surface(Protocol):
    registry: CollectorRegistry

    def status(self) -> dict[str, Any]:
        """What `tpu-watchdog status` shows, as JSON-able data."""
        ...

    def liveness(self) -> tuple[bool, str]:
        """(live, reason): the main loop ticks; what a restart could fix (a liveness probe)."""
        ...

    def health(self) -> tuple[bool, str]:
        """(healthy, reason): live, and every watched key answered well within the tolerance."""
        ...

    def readiness(self) -> tuple[bool, str]:
        """(ready, reason): False while a drain is pending or done for the current event."""
        ...


def parse_listen(listen: str) -> tuple[str, int]:
    """`HOST:PORT` or `[V6]:PORT` -> (host, port); ValueError naming what is wrong."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535 or not host:
        raise ValueError(f"listen address {listen!r} is not HOST:PORT (e.g. 127.0.0.1:9478)")
    return host.strip("[]"), int(port)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = "tpu-watchdog"  # the Server header names no Python version
    sys_version = ""
    error_message_format = "error %(code)d\n"  # unused (send_error is ours); never the request's words

    def setup(self) -> None:
        super().setup()
        self._pending = b""  # bytes read past the last head: the start of a pipelined request

    def version_string(self) -> str:
        return self.server_version

    def handle(self) -> None:
        try:
            super().handle()
        except OSError:  # reset, broken pipe or a timed-out write: nothing more to say to this client
            log.debug("http: connection from %s dropped", self.client_address[0], exc_info=True)

    def handle_one_request(self) -> None:
        """Read one request head within the limits and answer it; every refusal closes the connection."""
        self.close_connection = True
        self.command, self.requestline, self.request_version = "", "", "HTTP/1.1"
        try:
            head = self._read_head()
            if head is not None:  # None: the client left, or sent no whole head before the timeout
                self._serve(head)
        except RequestError as refused:
            self.send_error(refused.code)

    def _read_head(self) -> bytes | None:
        """Bytes up to the blank line ending a request head, read under one deadline for the whole head.

        A per-read timeout alone would keep a client that trickles a byte at a time (slowloris) forever.
        """
        deadline = time.monotonic() + self.server.connection_timeout
        buffer, self._pending = bytearray(self._pending), b""
        try:
            while True:
                end = HEAD_END.search(buffer)
                check_limits(buffer[: end.start() + 1] if end else buffer)
                if end:
                    self._pending = bytes(buffer[end.end() :])
                    return bytes(buffer[: end.start() + 1])
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self.connection.settimeout(remaining)
                chunk = self.connection.recv(4096)
                if not chunk:
                    return None
                buffer += chunk
        except TimeoutError:
            return None
        finally:
            self.connection.settimeout(self.server.connection_timeout)  # bounds the reply's write

    def _serve(self, head: bytes) -> None:
        method, target, version, fields = parse_head(head)
        self.command, self.path, self.request_version = method, target, version
        self.requestline = f"{method} {target} {version}"
        tokens = {token.strip() for token in fields.get("connection", "").lower().split(",")}
        self.close_connection = version == "HTTP/1.0" or "close" in tokens
        if method not in ("GET", "HEAD"):
            raise RequestError(405)
        length = fields.get("content-length", "0")
        if not (length.isascii() and length.isdigit()):
            raise RequestError(400)
        if length.strip("0") or "transfer-encoding" in fields:
            raise RequestError(413)  # answered without reading the body; the connection is then closed
        self._answer(send_body=method == "GET")

    def _answer(self, send_body: bool) -> None:
        path = self.path.split("?", 1)[0]
        try:
            code, content_type, body = self._page(path)
        except Exception:  # a failing page must not take the listener down
            log.exception("HTTP %s failed", path)
            self.send_error(500)  # logged above; the exception's text stays out of the answer
            return
        self._send(code, content_type, body, send_body)

    def _page(self, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for a path; raising here is a logged 500, never half an answer."""
        surface = self.server.surface
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(surface.registry)
        checks = {"/livez": surface.liveness, "/healthz": surface.health, "/readyz": surface.readiness}
        if path in checks:
            ok, reason = checks[path]()
            return 200 if ok else 503, _TEXT, f"{reason}\n".encode()
        if path == "/status":
            if not self.server.allowed(self.client_address[0]):
                return 403, _TEXT, _ERRORS[403]
            status = json.dumps(surface.status(), indent=2, sort_keys=True).encode() + b"\n"
            return 200, "application/json", status
        if path == "/":
            return 200, _TEXT, b"tpu-watchdog: /metrics /livez /healthz /readyz /status\n"
        return 404, _TEXT, _ERRORS[404]

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """A fixed body per status, then close: the base class quotes the request's words back."""
        self.close_connection = True
        allow = "GET, HEAD" if code == 405 else ""
        self._send(code, _TEXT, _ERRORS.get(code, b"error\n"), self.command != "HEAD", allow)

    def _send(self, code: int, content_type: str, body: bytes, send_body: bool, allow: str = "") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        if allow:
            self.send_header("Allow", allow)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http: " + format, *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # stop() must not wait on a slow client; a handler changes nothing
    request_queue_size = 64  # socketserver's 5 drops SYNs when Prometheus, probes and status come at once
    surface: Surface
    connection_timeout: float
    slots: threading.BoundedSemaphore
    status_allow: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]

    def allowed(self, client: str) -> bool:
        """May `client` (an address as accepted: IPv4 arrives as ::ffff:a.b.c.d on an IPv6 socket) read
        /status?"""
        address = ipaddress.ip_address(client)
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.status_allow)

    def process_request(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any
    ) -> None:
        """A thread per connection while a slot is free; beyond that, close at once rather than queue."""
        if not self.slots.acquire(blocking=False):
            log.debug("http: every connection slot busy; closing one from %s", client_address[0])
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any
    ) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any) -> None:
        log.exception("http: unexpected error serving %s", client_address[0])

    def serve_until(self, wake: socket.socket) -> None:
        """Accept connections until `wake` is readable, blocked in select with no timeout: socketserver's
        `serve_forever` wakes every 0.5 s to look for a `shutdown()`, two wakeups a second for nothing."""
        self.socket.setblocking(False)  # a client gone between select and accept: accept fails, never blocks
        with selectors.DefaultSelector() as selector:
            selector.register(self.socket, selectors.EVENT_READ)
            selector.register(wake, selectors.EVENT_READ)
            while all(key.fileobj is not wake for key, _ in selector.select()):
                self._accept()

    def _accept(self) -> None:
        try:
            request, client_address = self.get_request()
        except OSError:  # the client left before the accept (or it was taken already): nothing to serve
            return
        try:
            self.process_request(request, client_address)
        except Exception:  # noqa: BLE001 - logged by handle_error; the listener serves the next one
            self.handle_error(request, client_address)
            self.shutdown_request(request)


class _Server6(_Server):
    address_family = socket.AF_INET6


class HttpSurface:
    """Binds at construction (so a bad or busy address fails start-up early); serves after `start()`."""

    def __init__(
        self,
        listen: str,
        surface: Surface,
        connection_timeout: float = CONNECTION_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
        status_allow: Sequence[str] = LOOPBACK_NETWORKS,
    ) -> None:
        host, port = parse_listen(listen)
        server_class = _Server6 if ":" in host else _Server
        self._server = server_class((host, port), _Handler)
        self._server.surface = surface
        self._server.connection_timeout = connection_timeout
        self._server.slots = threading.BoundedSemaphore(max_connections)
        self._server.status_allow = tuple(ipaddress.ip_network(n) for n in status_allow)
        self._wake, self._waker = socket.socketpair()  # stop() writes to _waker: the listener returns at once
        self._thread = threading.Thread(target=self._server.serve_until, args=(self._wake,), name="http",
                                        daemon=True)  # fmt: skip

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else host
        return f"[{name}]:{port}" if ":" in name else f"{name}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._waker.send(b"x")
            self._thread.join(timeout=5)
        self._server.server_close()
        self._wake.close()
        self._waker.close()


class RetryingListener:
    """The HTTP surface protection never waits for: a listen address that is taken (another process on
    the port) or not this host's is no reason to leave the TPU jobs unprotected. `start()` binds if it
    can; if not, a thread tries again every `retry` s until it binds or `close()`. Each attempt is told to
    `attempted(address, error)` (error None: it listens on `address` now), from the thread that made it;
    whatever that teller raises is dropped there (the daemon's counts its own failures), never the retries."""

    def __init__(
        self,
        listen: str,
        surface: Surface,
        attempted: Callable[[str, str | None], None],
        retry: float = BIND_RETRY,
        status_allow: Sequence[str] = LOOPBACK_NETWORKS,
    ) -> None:
        self.listen, self.surface, self.attempted, self.retry = listen, surface, attempted, retry
        self.status_allow = status_allow
        self.http: HttpSurface | None = None  # set once bound
        self._closed = threading.Event()
        self._lock = threading.Lock()  # a bind that lands while close() runs is stopped, not leaked
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if not self._bind():
            self._thread = threading.Thread(target=self._keep_trying, name="http-bind", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            http, self.http = self.http, None
        if http is not None:
            http.stop()

    def _keep_trying(self) -> None:
        while not self._closed.wait(self.retry) and not self._bind():
            pass

    def _bind(self) -> bool:
        try:
            http = HttpSurface(self.listen, self.surface, status_allow=self.status_allow)
        except (OSError, ValueError) as error:  # taken, not this host's, a name that does not resolve
            self._tell(self.listen, _why_not(error))
            return False
        with self._lock:
            if self._closed.is_set():
                http.stop()
                return True
            self.http = http
            http.start()
        self._tell(http.address, None)
        return True

    def _tell(self, address: str, error: str | None) -> None:
        with contextlib.suppress(Exception):  # a failing teller must not end the binding (nor the thread)
            self.attempted(address, error)


def _why_not(error: OSError | ValueError) -> str:
    """`Address already in use`: a failed bind in words, without the library's repr."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error)
