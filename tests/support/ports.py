"""A stopped server's port, kept from every other server on the machine while a test needs it refused.

Tests run side by side, and each server they start binds port 0: the kernel may hand out a port that was
just freed. A daemon pointed at a stopped fake then talks to another test's fake, and answers it was never
meant to hear decide what it does."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


@contextlib.contextmanager
def port_held(address: str) -> Iterator[None]:
    """Bind `address` (HOST:PORT, IPv4) and never listen: a connection there is refused, and no bind to
    port 0 is given this port. SO_REUSEADDR lets the bind succeed over the stopped server's TIME_WAIT
    connections; the kernel still counts the port as taken when it picks one for port 0."""
    host, _, port = address.rpartition(":")
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind((host, int(port)))
        yield
    finally:
        holder.close()
