"""A real webhook receiver on loopback (stdlib http.server): it answers the statuses it is given, in order
(then 200), records each POST with what a probe said at its arrival, and can hold every answer until
released, to show that a webhook that does not answer keeps nothing waiting."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SECRET_PATH = "/services/T0HOOKS/B0HOOKS/s3cr3t-t0ken-never-shown"  # noqa: S105 - a test's made-up secret


@dataclass(frozen=True)
class Arrival:
    status: int  # what the receiver answered
    body: dict[str, Any]
    seen: object  # what the probe returned when the request arrived


class WebhookReceiver:
    def __init__(self, statuses: Iterable[int] = (503,), probe: Callable[[], object] = lambda: None) -> None:
        self.statuses = list(statuses)
        self.probe = probe
        self.arrivals: list[Arrival] = []
        self.holding = 0  # requests waiting for `release`
        self.released = threading.Event()
        self.released.set()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                seen = receiver.probe()
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
                with receiver._lock:
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                    receiver.holding += 1
                receiver.released.wait(30)
                with receiver._lock:
                    receiver.holding -= 1
                    receiver.arrivals.append(Arrival(status, body, seen))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: object) -> None:  # quiet: the test reads `arrivals`
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="webhook receiver", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{SECRET_PATH}"

    def hold(self) -> None:
        """From now on, answer nothing until `release`."""
        self.released.clear()

    def release(self) -> None:
        self.released.set()

    def delivered(self) -> list[dict[str, Any]]:
        """The bodies answered with a 2xx, in order."""
        with self._lock:
            return [a.body for a in self.arrivals if 200 <= a.status < 300]

    def types(self) -> list[str]:
        return [str(body["type"]) for body in self.delivered()]

    def __enter__(self) -> WebhookReceiver:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
