"""One GET to the metadata server, with the habits it demands, and every failure classified.

Never through a proxy (`trust_env = False`), always `Metadata-Flavor: Google`, never `X-Forwarded-For`;
the answer must carry `Metadata-Flavor: Google` (else it is not the metadata server), a body of at most
64 KiB, strictly UTF-8, whole within the read timeout (a body trickling in a byte at a time would otherwise
hold the watch forever, every byte resetting the per-read timeout). `close()` may be called from another
thread: it shuts down the sockets of requests in flight, so a hanging GET ends at once instead of after its
timeout. The body deadlines of all requests are kept by one thread (`Deadlines`), not a timer per request.
Both work by shutting down the socket each connection keeps from its `connect()`, not `connection.sock`:
http.client drops that (`sock = None`) once a response that closes the connection has begun, while the
response still reads from the socket, and urllib3 1.26 (Ubuntu 22.04's) does not keep it either.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import socket
import threading
import weakref
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import requests
import urllib3.exceptions
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection
from urllib3.connectionpool import HTTPConnectionPool

from watchdog.metadata.deadlines import Deadlines
from watchdog.metadata.errors import ErrorKind, MetadataError, kind_for_status

if TYPE_CHECKING:
    from urllib3._base_connection import BaseHTTPConnection  # the type urllib3's own pools declare

log = logging.getLogger(__name__)

DEFAULT_HOST = "metadata.google.internal"
HOST_ENV = "GCE_METADATA_HOST"
MAX_BODY_BYTES = 64 * 1024
CONNECT_TIMEOUT_SEC = 5.0
FLAVOR = ("Metadata-Flavor", "Google")


def resolve_metadata_host(explicit: str | None, environ: Mapping[str, str]) -> str:
    """host[:port] to use: the explicit value, else $GCE_METADATA_HOST, else metadata.google.internal."""
    for value, source in ((explicit, "--metadata-host"), (environ.get(HOST_ENV), HOST_ENV)):
        if value is None or not value.strip():
            continue
        host = value.strip()
        if "/" in host or any(c.isspace() for c in host) or not host.isprintable():
            raise ValueError(
                f"{source}={value!r}: expected host[:port] like 127.0.0.1:8080, no scheme or path"
            )
        return host
    return DEFAULT_HOST


@dataclass(frozen=True)
class MetadataResponse:
    status: int
    body: str
    etag: str | None


class _InFlight:
    """The open connections of one transport, so `close()` can shut their sockets down from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._connections: weakref.WeakSet[_AbortableConnection] = weakref.WeakSet()
        self.closed = False

    def opened(self, connection: _AbortableConnection) -> None:
        with self._lock:
            if not self.closed:
                self._connections.add(connection)
                return
        _shutdown(connection)
        raise ConnectionAbortedError("metadata transport closed")

    def close(self) -> None:
        with self._lock:
            self.closed = True
            connections = list(self._connections)
        for connection in connections:
            _shutdown(connection)


def _shutdown(connection: _AbortableConnection) -> None:
    sock = connection.connected_sock
    if sock is not None:
        with contextlib.suppress(OSError):  # already closed: nothing is waiting on it
            sock.shutdown(socket.SHUT_RDWR)


class _AbortableConnection(HTTPConnection):
    in_flight: _InFlight | None = None
    connected_sock: socket.socket | None = None  # the socket of the last connect(), kept (module docstring)

    def connect(self) -> None:
        super().connect()
        self.connected_sock = self.sock
        if self.in_flight is not None:
            self.in_flight.opened(self)


class _AbortableAdapter(HTTPAdapter):
    """An HTTPAdapter whose plain-HTTP connections register with an `_InFlight`."""

    def __init__(self, in_flight: _InFlight) -> None:
        self._in_flight = in_flight
        super().__init__(max_retries=0)

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False, **kwargs: Any) -> None:
        super().init_poolmanager(connections, maxsize, block, **kwargs)
        in_flight = self._in_flight

        class Pool(HTTPConnectionPool):
            ConnectionCls = _AbortableConnection

            def _new_conn(self) -> BaseHTTPConnection:
                connection = super()._new_conn()
                if isinstance(connection, _AbortableConnection):
                    connection.in_flight = in_flight
                return connection

        self.poolmanager.pool_classes_by_scheme = {**self.poolmanager.pool_classes_by_scheme, "http": Pool}


def _causes(exc: BaseException) -> list[BaseException]:
    """The exception and everything it wraps (cause, context, urllib3's `reason`, exception args)."""
    seen: list[BaseException] = []
    todo: list[BaseException] = [exc]
    while todo and len(seen) < 32:
        current = todo.pop(0)
        if any(current is s for s in seen):
            continue
        seen.append(current)
        linked = [current.__cause__, current.__context__, getattr(current, "reason", None), *current.args]
        todo.extend(e for e in linked if isinstance(e, BaseException))
    return seen


_RESET_TYPES = (
    ConnectionResetError,
    ConnectionAbortedError,
    BrokenPipeError,
    http.client.RemoteDisconnected,
    http.client.IncompleteRead,
    urllib3.exceptions.ProtocolError,
    requests.exceptions.ChunkedEncodingError,
)
_TIMEOUT_TYPES = (TimeoutError, socket.timeout, urllib3.exceptions.TimeoutError, requests.exceptions.Timeout)


def _innermost(exc: BaseException) -> str:
    """The root cause in a few words (`gaierror: [Errno -2] Name or service not known`), not urllib3's
    nested reprs of pools and connections."""
    root = next((e for e in reversed(_causes(exc)) if isinstance(e, OSError) and e.strerror), None)
    if root is None:
        return type(exc).__name__
    return f"{type(root).__name__}: {root.strerror}"[:120]


def classify_exception(exc: BaseException) -> ErrorKind:
    """The kind of a requests/urllib3/socket failure; refused and a name that does not resolve are
    checked first, as urllib3's NewConnectionError (and its NameResolutionError) is, for history's sake, a
    subclass of its connect-timeout error. Every urllib3 version wraps the resolver's socket.gaierror."""
    chain = _causes(exc)
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return ErrorKind.CONNECTION_REFUSED
    if any(isinstance(e, socket.gaierror) for e in chain):
        return ErrorKind.DNS
    if any(isinstance(e, _RESET_TYPES) for e in chain):
        return ErrorKind.CONNECTION_RESET
    if any(isinstance(e, _TIMEOUT_TYPES) for e in chain):
        return ErrorKind.TIMEOUT
    return ErrorKind.OTHER


def _content_length(response: requests.Response) -> int | None:
    """The body's length as the server declared it; None when it did not (chunked, or up to the close)."""
    value = response.headers.get("Content-Length", "")
    return int(value) if value.isdigit() else None


class MetadataTransport:
    """GETs under http://HOST/computeMetadata/v1/ with a session of its own (no proxies, no env settings)."""

    def __init__(self, host: str, session: requests.Session | None = None) -> None:
        self.host = host
        self.base_url = f"http://{host}/computeMetadata/v1/"
        self._in_flight = _InFlight()
        self._deadlines = Deadlines()
        self._session = session if session is not None else requests.Session()
        self._session.trust_env = False  # never a proxy, never ~/.netrc: the MDS must be reached directly
        self._session.proxies.clear()
        self._session.headers.pop("X-Forwarded-For", None)
        self._session.mount("http://", _AbortableAdapter(self._in_flight))

    def close(self) -> None:
        """End every request in flight now and refuse later ones; safe from any thread, idempotent."""
        self._in_flight.close()
        self._deadlines.close()
        self._session.close()

    @property
    def closed(self) -> bool:
        return self._in_flight.closed

    def __enter__(self) -> MetadataTransport:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def get(
        self,
        path: str,
        *,
        wait_for_change: bool = False,
        last_etag: str | None = None,
        timeout_sec: int | None = None,
        alt: str | None = None,
        read_timeout: float = 10.0,
        pass_statuses: Collection[int] = (),
    ) -> MetadataResponse:
        """The answer for `path`; a non-2xx status raises MetadataError unless it is in `pass_statuses`
        (then the caller decides by the body, as upcoming-maintenance must for 503)."""
        if not path or path.startswith("/") or ".." in path or "?" in path or "#" in path:
            raise MetadataError(ErrorKind.OTHER, path, "path must be relative, like instance/preempted")
        if self.closed:
            raise MetadataError(ErrorKind.OTHER, path, "transport closed (shutting down)")
        params: dict[str, str] = {}
        if wait_for_change:
            params["wait_for_change"] = "true"
            if last_etag is not None:
                params["last_etag"] = last_etag
        if timeout_sec is not None:
            params["timeout_sec"] = str(int(timeout_sec))
        if alt is not None:
            params["alt"] = alt
        try:
            response = self._session.get(
                self.base_url + path,
                params=params,
                headers=dict([FLAVOR]),
                timeout=(CONNECT_TIMEOUT_SEC, read_timeout),
                stream=True,
                allow_redirects=False,
            )
        except requests.RequestException as exc:
            raise self._failure(exc, path) from exc
        with response:
            return self._read(response, path, pass_statuses, read_timeout)

    def _failure(self, exc: BaseException, path: str) -> MetadataError:
        kind = classify_exception(exc)
        detail = f"talking to {self.host}"  # the kind says what happened; the exception's text is a repr
        if kind is ErrorKind.OTHER:
            detail += f": {_innermost(exc)}"
        if self.closed:
            detail = "request ended: transport closed (shutting down)"
        return MetadataError(kind, path, detail)

    def _read(
        self, response: requests.Response, path: str, pass_statuses: Collection[int], body_timeout: float
    ) -> MetadataResponse:
        status = response.status_code
        if response.headers.get(FLAVOR[0]) != FLAVOR[1]:
            raise MetadataError(
                ErrorKind.MISSING_FLAVOR,
                path,
                f"HTTP {status} from {self.host} without 'Metadata-Flavor: Google': not the metadata server "
                "(a proxy or another service on that address?)",
                status,
            )
        chunks: list[bytes] = []
        size = 0
        expired = threading.Event()
        connection = getattr(response.raw, "connection", None)

        def expire() -> None:
            expired.set()
            if isinstance(connection, _AbortableConnection):
                _shutdown(connection)

        late = MetadataError(
            ErrorKind.TIMEOUT, path, f"body not complete within {body_timeout:g} s (trickling)", status
        )
        deadline = self._deadlines.after(body_timeout, expire)
        try:
            for chunk in response.iter_content(chunk_size=16 * 1024):
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise MetadataError(
                        ErrorKind.BODY_TOO_LARGE, path, f"body over {MAX_BODY_BYTES} bytes", status
                    )
                chunks.append(chunk)
        except requests.RequestException as exc:
            raise (late if expired.is_set() else self._failure(exc, path)) from exc
        finally:
            self._deadlines.cancel(deadline)
        # urllib3 1.26 ends a body cut short (by the deadline or the server) quietly, as if it were whole.
        expected = _content_length(response)
        if expired.is_set() if expected is None else size != expected:
            if expired.is_set():
                raise late
            detail = f"body ended after {size} of its {expected} bytes"
            raise MetadataError(ErrorKind.CONNECTION_RESET, path, detail, status)
        try:
            body = b"".join(chunks).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MetadataError(
                ErrorKind.BODY_NOT_TEXT, path, f"body is not UTF-8 text: {exc}", status
            ) from None
        if 200 <= status < 300 or status in pass_statuses:
            return MetadataResponse(status=status, body=body, etag=response.headers.get("ETag"))
        snippet = body[:200].strip()
        raise MetadataError(kind_for_status(status), path, f"HTTP {status}: {snippet!r}", status)
