"""`port_held` keeps a stopped server's port from every server binding port 0, and refuses connections;
`reserved_port` keeps a port so for the server the test starts, which binds it all the same.

Checked in a network namespace of its own, whose ephemeral range is two ports: with one held, a bind to
port 0 gets the other, and a second bind finds none, where without the hold it would be given the first."""

from __future__ import annotations

import subprocess
import sys

from tests.support.pidns import needs_unshare
from tests.support.units import REPO

IN_A_NETNS = r"""
import socket, subprocess, sys
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
with open("/proc/sys/net/ipv4/ip_local_port_range", "w") as ports:
    ports.write("40000 40001")
from tests.support.ports import port_held, reserved_port

def bind_any():
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as http.server and the fake do
    try:
        server.bind(("127.0.0.1", 0))
    except OSError:
        return None, None
    server.listen()
    return server, server.getsockname()[1]

with port_held("127.0.0.1:40000"):
    first, port = bind_any()
    second, again = bind_any()
    print(port, again)
    first.close()
    try:
        socket.create_connection(("127.0.0.1", 40000), timeout=5)
        print("connected")
    except ConnectionRefusedError:
        print("refused")

with reserved_port() as reserved:
    other, port = bind_any()
    none, _ = bind_any()
    own = socket.socket()
    own.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    own.bind(("127.0.0.1", reserved))
    own.listen()
    other.close()  # a port for the client's end of the connection
    socket.create_connection(("127.0.0.1", reserved), timeout=5).close()
    print(*sorted([reserved, port]), none)  # the two ports, one each
"""


@needs_unshare
def test_a_held_port_is_never_given_out_and_refuses_connections() -> None:
    done = subprocess.run(
        ["unshare", "--net", sys.executable, "-c", IN_A_NETNS],
        capture_output=True, text=True, timeout=30, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["40001", "None", "refused", "40000", "40001", "None"]
