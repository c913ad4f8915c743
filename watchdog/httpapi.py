"""The daemon's one HTTP listener: /metrics, /healthz, /readyz, /status. Read-only by construction.

GET and HEAD only (anything else is 405 with an Allow header); no endpoint changes anything, so exposing it
to a Prometheus server is safe. The answers come from a `Surface` the daemon implements.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)


class Surface(Protocol):
    registry: CollectorRegistry

    def status(self) -> dict[str, Any]:
        """What `tpu-watchdog status` shows, as JSON-able data."""
        ...

    def health(self) -> tuple[bool, str]:
        """(healthy, reason): every watch heard from recently and the main loop ticking."""
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

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def _refuse(self) -> None:
        self._send(
            405, "text/plain; charset=utf-8", b"method not allowed: read-only endpoint\n", True, "GET, HEAD"
        )

    # http.server dispatches on these exact names.
    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse  # noqa: N815

    def _answer(self, send_body: bool) -> None:
        surface = self.server.surface
        path = self.path.split("?", 1)[0]
        try:
            if path == "/metrics":
                body = generate_latest(surface.registry)
                self._send(200, CONTENT_TYPE_LATEST, body, send_body)
            elif path in ("/healthz", "/readyz"):
                ok, reason = surface.health() if path == "/healthz" else surface.readiness()
                self._send(200 if ok else 503, "text/plain; charset=utf-8", f"{reason}\n".encode(), send_body)
            elif path == "/status":
                body = json.dumps(surface.status(), indent=2, sort_keys=True).encode() + b"\n"
                self._send(200, "application/json", body, send_body)
            elif path == "/":
                index = b"tpu-watchdog: /metrics /healthz /readyz /status\n"
                self._send(200, "text/plain; charset=utf-8", index, send_body)
            else:
                self._send(404, "text/plain; charset=utf-8", b"not found\n", send_body)
        except Exception as error:  # a failing page must not take the listener down
            log.exception("HTTP %s failed", path)
            self._send(500, "text/plain; charset=utf-8", f"internal error: {error}\n".encode(), send_body)

    def _send(self, code: int, content_type: str, body: bytes, send_body: bool, allow: str = "") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        if allow:
            self.send_header("Allow", allow)
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http: " + format, *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64  # socketserver's 5 drops SYNs when Prometheus, probes and status come at once
    surface: Surface


class _Server6(_Server):
    address_family = socket.AF_INET6


class HttpSurface:
    """Binds at construction (so a bad or busy address fails start-up early); serves after `start()`."""

    def __init__(self, listen: str, surface: Surface) -> None:
        host, port = parse_listen(listen)
        server_class = _Server6 if ":" in host else _Server
        self._server = server_class((host, port), _Handler)
        self._server.surface = surface
        self._thread = threading.Thread(target=self._server.serve_forever, name="http", daemon=True)

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else host
        return f"[{name}]:{port}" if ":" in name else f"{name}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()
