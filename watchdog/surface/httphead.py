"""Request heads for the HTTP listener, parsed strictly under fixed limits. Pure: bytes in, a verdict out.

http.server's own parser allows 64 KiB lines and 100 headers and guesses at malformed input; a read-only
metrics endpoint needs none of that, so anything unusual is refused with a status code.
"""

from __future__ import annotations

import re

MAX_REQUEST_LINE = 8 * 1024  # bytes, line end included: our paths are short; 8 KiB is what proxies allow
MAX_HEADERS = 64  # Prometheus and kubelet send fewer than ten; room for proxies, not for a flood
MAX_HEADER_BYTES = 16 * 1024  # all header lines together: bounds the memory one connection can hold

HEAD_END = re.compile(rb"\n\r?\n")
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 token: methods and header names
_TARGET = re.compile(rb"[\x21-\x7e]+")  # printable ASCII; no controls, spaces or raw 8-bit bytes
_VERSION = re.compile(rb"HTTP/[0-9]\.[0-9]")
_FIELD_VALUE = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")  # no controls: a bare CR or NUL is refused


class RequestError(Exception):
    """A request answered with an error status (and a closed connection) instead of a page."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def check_limits(head: bytes | bytearray) -> None:
    """Refuse a head, complete or not, as soon as it passes a limit: no need to wait for the rest."""
    line_end = head.find(b"\n", 0, MAX_REQUEST_LINE)
    if line_end < 0:
        if len(head) >= MAX_REQUEST_LINE:
            raise RequestError(414)
    elif len(head) - line_end - 1 > MAX_HEADER_BYTES:
        raise RequestError(431)


def parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    """(method, target, version, fields by lower-case name) of a complete head; RequestError if malformed.

    Strict on purpose (RFC 9112): one space between the three words, header names are tokens, and bare
    CRs, NULs and obs-fold lines are refused rather than guessed at.
    """
    request_line, *field_lines = (line.removesuffix(b"\r") for line in head.split(b"\n")[:-1])
    words = request_line.split(b" ")
    if len(words) != 3 or not (
        _TOKEN.fullmatch(words[0]) and _TARGET.fullmatch(words[1]) and _VERSION.fullmatch(words[2])
    ):
        raise RequestError(400)
    if words[2] not in (b"HTTP/1.0", b"HTTP/1.1"):
        raise RequestError(505)
    if len(field_lines) > MAX_HEADERS:
        raise RequestError(431)
    fields: dict[str, str] = {}
    for line in field_lines:
        name, colon, raw = line.partition(b":")
        raw = raw.strip(b" \t")
        if not colon or not _TOKEN.fullmatch(name) or not _FIELD_VALUE.fullmatch(raw):
            raise RequestError(400)
        key, value = name.decode("ascii").lower(), raw.decode("latin-1")
        fields[key] = f"{fields[key]}, {value}" if key in fields else value
    method, target, version = (word.decode("ascii") for word in words)
    return method, target, version, fields
