"""Ports kept from every other server on the machine while a test needs them: a port its own server is to
bind later, and a stopped server's port that must stay refused.

Tests run side by side, and each server they start binds port 0: the kernel may hand out a port that was
just freed, or found free a moment ago. A daemon pointed at a stopped fake then talks to another test's
fake, and a daemon told to listen on a port found free finds it taken. The holding socket
(`watchdog.fake.listen.hold_port`) binds and never listens."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from watchdog.fake.listen import hold_port


@contextlib.contextmanager
def reserved_port(host: str = "127.0.0.1") -> Iterator[int]:
    """A free port of `host`, kept from every bind to port 0 until the block ends; the test's own server
    binds it meanwhile (the daemon's HTTP listener and Prometheus set SO_REUSEADDR)."""
    with hold_port(host) as holder:
        port: int = holder.getsockname()[1]
        yield port


@contextlib.contextmanager
def port_held(address: str) -> Iterator[None]:
    """Bind `address` (HOST:PORT, IPv4) and never listen: a connection there is refused, and no bind to
    port 0 is given this port (SO_REUSEADDR lets the bind succeed over the stopped server's TIME_WAIT
    connections)."""
    host, _, port = address.rpartition(":")
    with hold_port(host, int(port)):
        yield
