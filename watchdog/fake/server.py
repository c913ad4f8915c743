"""The fake GCE metadata server: a threaded HTTP/1.1 server on loopback, in-process or as a command.

    with FakeMetadataServer(listen="127.0.0.1:0") as fake:
        os.environ["GCE_METADATA_HOST"] = fake.address
        fake.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")

Here: the lifecycle and the in-process control. HTTP in handler.py, protocol rules in answer.py, the control
API in control.py, values and hanging waits in store.py, faults in faults.py.
"""

from __future__ import annotations

import threading
from types import TracebackType

from watchdog.fake.faults import Fault, FaultBook
from watchdog.fake.handler import Backend, MetadataHTTPServer
from watchdog.fake.listen import check_listen, parse_listen
from watchdog.fake.requestlog import DEFAULT_CAPACITY, RequestLog, RequestRecord
from watchdog.fake.store import MetadataStore, MetadataValue, Snapshot
from watchdog.fake.vm_identity import VmIdentity

__all__ = ["FakeMetadataServer", "Fault", "RequestRecord"]

POLL_INTERVAL = 0.1  # how long serve_forever takes to notice shutdown() (stop() wakes it at once)
STOP_GRACE = 0.5  # how long stop() lets answers in flight finish before cutting connections


class FakeMetadataServer:
    """Serves the fake from background threads between start() and stop() (or a with block)."""

    def __init__(
        self, listen: str = "127.0.0.1:0", allow_remote: bool = False, log_capacity: int = DEFAULT_CAPACITY
    ) -> None:
        self.listen = listen  # as asked for; `address` is where it really listens (port 0 resolved)
        self._listen = parse_listen(listen)
        check_listen(self._listen, allow_remote)
        self.store = MetadataStore()
        self.faults = FaultBook()
        self.log = RequestLog(log_capacity)
        self.stop_event = threading.Event()
        self._httpd: MetadataHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._address: str | None = None

    # --- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> FakeMetadataServer:
        if self._httpd is not None or self.stop_event.is_set():
            raise RuntimeError("a fake metadata server starts once; make a new one")
        backend = Backend(self.store, self.faults, self.log, self.stop_event)
        self._httpd = MetadataHTTPServer(self._listen, backend)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(POLL_INTERVAL,), name="fake-metadata", daemon=True
        )
        self._thread.start()
        host, port = self._httpd.server_address[:2]
        host_text = host.decode() if isinstance(host, bytes) else str(host)
        self._address = f"[{host_text}]:{port}" if ":" in host_text else f"{host_text}:{port}"
        return self

    def stop(self) -> None:
        """Answer hanging requests (503), close every connection, and wait for the handler threads."""
        self.stop_event.set()
        self.store.wake_all()
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        shutter = threading.Thread(target=httpd.shutdown, name="fake-metadata-stop")
        shutter.start()
        httpd.wake()  # serve_forever notices shutdown() at once instead of after its poll interval
        shutter.join()
        # Let answers in flight (the 503s of woken hanging GETs) go out, then cut idle keep-alive reads.
        httpd.wait_idle(STOP_GRACE)
        httpd.close_connections()
        httpd.server_close()  # joins the handler threads
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> FakeMetadataServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- where ---------------------------------------------------------------------------------------
    @property
    def address(self) -> str:
        """HOST:PORT as GCE_METADATA_HOST takes it (still known after stop())."""
        if self._address is None:
            raise RuntimeError("the fake metadata server was never started")
        return self._address

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    # --- control -------------------------------------------------------------------------------------
    def set(self, path: str, value: MetadataValue, status: int = 200) -> bool:
        """Serve `value` at `path` (str as text; dict/list as JSON). True when it changed."""
        return self.store.set(path, value, status)

    def set_identity(self, identity: VmIdentity) -> list[str]:
        """Serve every key of a VM's identity, TPU or GPU (fake/vm_identity.py); the paths that changed."""
        return self.store.set_identity(identity)

    def reset(self, path: str | None = None) -> bool:
        """Back to the default answer: one key (or subtree), or everything when `path` is None."""
        return self.store.reset(path)

    def delete(self, path: str) -> None:
        """The key no longer exists (404), as on a machine without it. KeyError when already absent."""
        self.store.delete(path)

    def lookup(self, path: str) -> Snapshot | None:
        return self.store.lookup(path)

    def hanging(self) -> int:
        """How many wait_for_change requests are hanging right now."""
        return self.store.waiting()

    def expire_hanging(self) -> None:
        """Answer every hanging GET now, as at the end of its timeout (the value unchanged)."""
        self.store.expire_waits()

    def add_fault(self, fault: Fault) -> None:
        self.faults.add(fault)

    def requests(self) -> list[RequestRecord]:
        """Recent metadata requests, oldest first, each logged as its answer is sent (a hanging GET: when it
        returns), so a client holding an answer finds its record here."""
        return self.log.records()
