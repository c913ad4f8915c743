"""The classified failures of a metadata request: a small fixed set, because they become metric labels."""

from __future__ import annotations

import enum


class ErrorKind(enum.Enum):
    """Stable lower_snake values: they are metric label values and log words, so never rename one."""

    CONNECTION_REFUSED = "connection_refused"
    CONNECTION_RESET = "connection_reset"
    TIMEOUT = "timeout"
    DNS = "dns"  # the metadata server's name did not resolve (metadata.google.internal, GCE_METADATA_HOST)
    HTTP_5XX = "http_5xx"
    HTTP_429 = "http_429"
    HTTP_403 = "http_403"
    HTTP_404 = "http_404"
    HTTP_4XX = "http_4xx"  # any other 4xx (400 for a bad query, 412, ...)
    BODY_NOT_TEXT = "body_not_text"
    BODY_TOO_LARGE = "body_too_large"
    MISSING_FLAVOR = "missing_flavor"
    MALFORMED_VALUE = "malformed_value"
    OTHER = "other"


# The failures with no answer from the server: down, unreachable, gone mid-answer, or its name (which on GCE
# the metadata server itself resolves) not resolving. The server is link-local, so a watch retries these
# within about a second (backoff.py): it hears the server's return at once, whatever the outage's length.
NO_ANSWER = frozenset(
    {ErrorKind.CONNECTION_REFUSED, ErrorKind.CONNECTION_RESET, ErrorKind.TIMEOUT, ErrorKind.DNS}
)


def kind_for_status(status: int) -> ErrorKind:
    """The kind of a non-2xx HTTP status."""
    if status in (403, 404, 429):
        return ErrorKind(f"http_{status}")
    if 400 <= status < 500:
        return ErrorKind.HTTP_4XX
    if 500 <= status < 600:
        return ErrorKind.HTTP_5XX
    return ErrorKind.OTHER  # 1xx/3xx: the metadata server never redirects; a proxy or impostor might


class MetadataError(Exception):
    """One failed metadata request: what kind of failure, on which path, and the details for the log."""

    def __init__(self, kind: ErrorKind, path: str, detail: str, status: int | None = None) -> None:
        super().__init__(kind, path, detail, status)
        self.kind = kind
        self.path = path
        self.detail = detail
        self.status = status

    def __str__(self) -> str:
        return f"{self.path}: {self.kind.value}: {self.detail}"
