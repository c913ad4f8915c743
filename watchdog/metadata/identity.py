"""Fetch the host's identity keys (core/identity.py names and parses them): one plain GET each.

A 404 is an answer (this machine has no such key: not a TPU VM, or an older image), kept as None; any other
failure is returned for the caller to retry, so one slow key never holds the others back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from watchdog.metadata.errors import ErrorKind, MetadataError
from watchdog.metadata.transport import CONNECT_TIMEOUT_SEC, MetadataTransport


@dataclass(frozen=True)
class Fetched:
    """What one round of GETs learned: path -> body (None: 404, not there), and path -> why it failed."""

    values: dict[str, str | None] = field(default_factory=dict)
    failed: dict[str, MetadataError] = field(default_factory=dict)


def fetch_identity(transport: MetadataTransport, paths: Iterable[str]) -> Fetched:
    """One GET per path, each bounded by the connect timeout (these keys answer at once)."""
    fetched = Fetched()
    for path in paths:
        try:
            fetched.values[path] = transport.get(path, read_timeout=CONNECT_TIMEOUT_SEC).body
        except MetadataError as exc:
            if exc.kind is ErrorKind.HTTP_404:
                fetched.values[path] = None
            else:
                fetched.failed[path] = exc
    return fetched
