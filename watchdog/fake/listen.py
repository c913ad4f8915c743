"""Where the fake listens: HOST:PORT parsing, and the refusal to listen off loopback by accident.

The fake has no authentication and lets anyone trigger "maintenance": on a real VM's network that would be
an open switch to drain training jobs, so a non-loopback address needs an explicit allow_remote.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

DEFAULT_LISTEN = "127.0.0.1:8053"


@dataclass(frozen=True)
class ListenAddress:
    host: str  # an IP literal (IPv6 without brackets) or "localhost"
    port: int

    @property
    def family(self) -> socket.AddressFamily:
        return socket.AF_INET6 if ":" in self.host else socket.AF_INET

    @property
    def bind_host(self) -> str:
        return "127.0.0.1" if self.host == "localhost" else self.host

    @property
    def is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def parse_listen(text: str) -> ListenAddress:
    """HOST:PORT or [IPv6]:PORT; ValueError saying what is wrong."""
    if text.startswith("["):
        host, sep, port_text = text[1:].partition("]:")
        if not sep:
            raise ValueError(f"bad listen address {text!r}: expected [IPv6]:PORT, like [::1]:8053")
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ValueError(f"bad listen address {text!r}: expected HOST:PORT, like {DEFAULT_LISTEN}")
        if ":" in host:
            raise ValueError(f"bad listen address {text!r}: write an IPv6 host in brackets, like [::1]:8053")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"bad listen address {text!r}: the port must be 0..65535 (0 picks a free one)")
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(
                f"bad listen address {text!r}: the host must be an IP address or localhost"
            ) from None
    return ListenAddress(host, int(port_text))


def check_listen(address: ListenAddress, allow_remote: bool) -> None:
    if not address.is_loopback and not allow_remote:
        raise ValueError(
            f"refusing to listen on {address.host}:{address.port}: not a loopback address, and the fake lets "
            "anyone who can reach it fake a maintenance event; pass allow_remote=True (--allow-remote) if "
            "you mean it"
        )


def hold_port(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A socket bound to HOST:PORT (port 0: a free one) that never listens. While it is open, no bind to port
    0 on the machine is given that port and a connection there is refused, yet a server that binds it with
    SO_REUSEADDR (Python's HTTP servers, gRPC, Go's listeners) still can. A port found free and closed until
    its server binds it may meanwhile be handed to any program binding port 0 (a daemon's HTTP listener took
    a simulated job's coordinator port so). The caller closes it."""
    holder = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind((host, port))
    except OSError:
        holder.close()
        raise
    return holder
