"""Text every output can carry: a process's name (psutil decodes a name that is not UTF-8 with
surrogateescape) or a string read back from a file may hold lone surrogates, which UTF-8 cannot encode.
The journal, a JSON line or a webhook would then refuse the whole line; escaped, the line goes out."""

from __future__ import annotations


def valid_text(value: str) -> str:
    """`value` with each lone surrogate written as its escape (`\\udc80`); valid text comes back as is."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value
