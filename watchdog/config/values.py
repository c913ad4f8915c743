"""Parsers for single configuration values: a TOML value or a text (environment, flag) in, a typed value out.

Pure. Each parser raises `BadValueError` with what was wrong; the loader adds where the value came from and
what is allowed, so every message an SRE sees names the file/variable/flag, the key, and the fix.
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
import os
import re
import shlex
import sys
from dataclasses import dataclass
from urllib.parse import urlsplit

from watchdog.core.devices import everyone_holds, number_text, parse_number
from watchdog.core.redaction import redacted_url

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - TPU VM images ship Python 3.10, where tomli is the same parser.
    import tomli as tomllib


class BadValueError(ValueError):
    """A value of the wrong type or out of range; the message says what was wrong with it."""


@dataclass(frozen=True)
class Address:
    """A host and a port; `str()` gives back the `HOST:PORT` spelling (IPv6 in brackets)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


PATH_MAX = 4096  # bytes, with the terminating NUL: the kernel refuses a longer path (ENAMETOOLONG)
_HOSTNAME_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def show(value: object) -> str:
    """A value as it would be written in the TOML file (for messages and `tpu-watchdog config`)."""
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show(item) for item in value) + "]"
    return str(value)


def _type_name(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return type(value).__name__


def duration(number: float) -> str:
    """Seconds in words for a bound: `86400 s (24 h)`, `2592000 s (30 d)`."""
    for unit, size, least in (("d", 86400, 2 * 86400), ("h", 3600, 3600), ("min", 60, 60)):
        if number >= least and number % size == 0:
            return f"{number:.0f} s ({number / size:.0f} {unit})"
    return f"{number:g} s"


def seconds(value: object, *, maximum: float, positive: bool = False) -> float:
    """A duration in seconds: a finite number, >= 0 (or > 0 when `positive`), at most `maximum`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadValueError(f"{show(value)} is {_type_name(value)}, not a number of seconds")
    number = float(value)
    if not math.isfinite(number):
        raise BadValueError(f"{show(value)} is not a finite number")
    if number < 0:
        raise BadValueError(f"{show(value)} is negative")
    if positive and number == 0:
        raise BadValueError("0 is not allowed here")
    if number > maximum:
        raise BadValueError(f"{number:g} is more than the maximum, {duration(maximum)}")
    return number


def seconds_text(text: str, *, maximum: float, positive: bool = False) -> float:
    try:
        number = float(text.strip())
    except ValueError:
        raise BadValueError(f"{text!r} is not a number of seconds") from None
    return seconds(number, maximum=maximum, positive=positive)


def optional_seconds(value: object, *, maximum: float) -> float | None:
    """Seconds where 0 means off (None)."""
    number = seconds(value, maximum=maximum)
    return number or None


def optional_seconds_text(text: str, *, maximum: float) -> float | None:
    return None if text.strip() in ("", "off") else seconds_text(text, maximum=maximum) or None


def boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise BadValueError(f"{show(value)} is {_type_name(value)}, not true or false")
    return value


def boolean_text(text: str) -> bool:
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise BadValueError(f"{text!r} is not a boolean")


def choice(value: object, allowed: tuple[str, ...]) -> str:
    """One of `allowed`, compared without case (the result is the spelling in `allowed`)."""
    if not isinstance(value, str):
        raise BadValueError(f"{show(value)} is {_type_name(value)}, not a string")
    word = value.strip().lower()
    if word not in allowed:
        raise BadValueError(f"{show(value)} is not one of the allowed values")
    return word


def string(value: object, *, absolute_path: bool = False) -> str:
    if not isinstance(value, str):
        raise BadValueError(f"{show(value)} is {_type_name(value)}, not a string")
    if not value.strip():
        raise BadValueError("an empty string is not allowed")
    if "\0" in value:
        raise BadValueError(f"{value!r:.80} holds a NUL character, which no path, name or argument can")
    if absolute_path and not value.startswith("/"):
        raise BadValueError(f"{show(value)} is not an absolute path")
    if absolute_path and len(os.fsencode(value)) >= PATH_MAX:
        raise BadValueError(f"{value!r:.80}... is longer than Linux's PATH_MAX ({PATH_MAX} bytes)")
    return value


def strings(value: object, *, absolute_path: bool = False, non_empty: bool = False) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise BadValueError(f"{show(value)} is {_type_name(value)}, not a list of strings")
    if non_empty and not value:
        raise BadValueError("an empty list is not allowed")
    return tuple(string(item, absolute_path=absolute_path) for item in value)


def networks(value: object) -> tuple[str, ...]:
    """IP networks in CIDR form (`127.0.0.0/8`, `::1/128`, a bare address is its /32 or /128), written back
    normalised; an empty list is allowed (nobody)."""
    result = []
    for item in strings(value):
        try:
            result.append(str(ipaddress.ip_network(item.strip(), strict=True)))
        except ValueError as error:
            hint = ""
            with contextlib.suppress(ValueError):
                hint = f" (did you mean {ipaddress.ip_network(item.strip(), strict=False)}?)"
            raise BadValueError(f"{show(item)} is not an IP network: {error}{hint}") from None
    return tuple(result)


def integers(value: object, *, minimum: int, maximum: int) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise BadValueError(f"{show(value)} is {_type_name(value)}, not a list of integers")
    result = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int):
            raise BadValueError(f"{show(item)} is {_type_name(item)}, not an integer")
        if item < minimum:
            raise BadValueError(f"{item} is less than {minimum}")
        if item > maximum:
            raise BadValueError(f"{item} is more than the maximum, {maximum}")
        result.append(item)
    return tuple(result)


def list_text(text: str) -> list[object]:
    """A list from the environment: a TOML array (`["a", "b"]`) or comma-separated words (`a,b`)."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            parsed: list[object] = tomllib.loads(f"v = {stripped}")["v"]
        except tomllib.TOMLDecodeError as error:
            raise BadValueError(f"{text!r} is not a TOML array ({error})") from None
        except RecursionError:  # tomllib recurses once per level of nesting
            raise BadValueError(f"{text!r:.80} is nested too deeply") from None
        return parsed
    return [word.strip() for word in stripped.split(",") if word.strip()]


def integers_text(text: str, *, minimum: int, maximum: int) -> tuple[int, ...]:
    words = list_text(text)
    try:
        numbers: list[object] = [int(w) if isinstance(w, str) else w for w in words]
    except ValueError:
        raise BadValueError(f"{text!r} is not a list of integers") from None
    return integers(numbers, minimum=minimum, maximum=maximum)


def command(value: object) -> tuple[str, ...] | None:
    """A hook command: an argv list (run without a shell). An empty list means no hook."""
    if isinstance(value, list) and not value:
        return None
    return strings(value)


def command_text(text: str) -> tuple[str, ...] | None:
    """A hook command from the environment: a TOML array, or words split like a shell would (no shell
    runs it); empty means no hook."""
    stripped = text.strip()
    if not stripped:
        return None
    if stripped.startswith("["):
        return command(list_text(stripped))
    try:
        return command(shlex.split(stripped))
    except ValueError as error:
        raise BadValueError(f"{text!r} cannot be split into words ({error})") from None


def _host(text: str) -> str:
    if text.startswith("[") and text.endswith("]"):
        try:
            return str(ipaddress.IPv6Address(text[1:-1]))
        except ValueError:
            raise BadValueError(f"{text!r} is not an IPv6 address") from None
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        pass
    labels = text.rstrip(".").split(".")
    if len(text) > 253 or not all(_HOSTNAME_LABEL.match(label) for label in labels):
        raise BadValueError(f"{text!r} is not a host name or an IP address")
    return text


def _port(text: str, minimum: int) -> int:
    if not (text.isascii() and text.isdigit()) or not minimum <= int(text) <= 65535:  # int("²") fails
        raise BadValueError(f"port {text!r} is not a number from {minimum} to 65535")
    return int(text)


def _split_host_port(text: str) -> tuple[str, str | None]:
    if text.startswith("["):
        host, bracket, rest = text.partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise BadValueError(f"{text!r} is not [IPv6]:PORT")
        return host + "]", rest[1:] if rest else None
    if text.count(":") > 1:
        raise BadValueError(f"{text!r}: write an IPv6 address in brackets, e.g. [::1]:9478")
    host, colon, port = text.partition(":")
    return host, port if colon else None


def listen_address(value: object) -> Address:
    """HOST:PORT to serve on (port 0 picks a free port)."""
    text = string(value).strip()
    host, port = _split_host_port(text)
    if port is None:
        raise BadValueError(f"{show(value)} has no port")
    return Address(_host(host), _port(port, 0))


def metadata_host(value: object) -> str:
    """HOST or HOST:PORT of the metadata server (what GCE_METADATA_HOST holds)."""
    text = string(value).strip()
    if "://" in text:
        raise BadValueError(f"{show(value)} has a scheme; give only the host (and port)")
    host, port = _split_host_port(text)
    _host(host)
    if port is not None:
        _port(port, 1)
    return text


def webhook_urls(value: object, *, maximum: int) -> tuple[str, ...]:
    """At most `maximum` webhook URLs: http(s) with a host. A URL is a secret, so a message shows it only
    redacted."""
    if not isinstance(value, list):
        raise BadValueError(f"{_type_name(value)} is not a list of URLs")
    if len(value) > maximum:
        raise BadValueError(f"{len(value)} URLs are more than the maximum, {maximum}")
    urls = []
    for item in value:
        if not isinstance(item, str):
            raise BadValueError(f"{show(item)} is {_type_name(item)}, not a URL")
        url = item.strip()
        try:
            parts = urlsplit(url)
            good = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
        except ValueError:  # a port that is no number
            good = False
        if not good or not url.isprintable() or " " in url:
            raise BadValueError(
                f"{redacted_url(url)} (shown redacted) is not an http:// or https:// URL with a host"
            )
        urls.append(url)
    return tuple(urls)


def webhook_urls_text(text: str, *, maximum: int) -> tuple[str, ...]:
    """From the environment: a TOML array, or URLs separated by commas or white space."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            items = list_text(stripped)
        except BadValueError:  # its message quotes the text, and the text holds URLs
            raise BadValueError(
                "the value (not shown: it holds webhook URLs) is not a TOML array; give "
                '["https://...", ...] or URLs separated by commas'
            ) from None
        return webhook_urls(items, maximum=maximum)
    return webhook_urls([word for word in re.split(r"[,\s]+", stripped) if word], maximum=maximum)


def device_numbers(value: object) -> tuple[str, ...]:
    """Device numbers "MAJ:MIN", written back normalised; never one nearly every process holds (/dev/null,
    a terminal): naming it would make every process a TPU holder."""
    result = []
    for item in strings(value):
        try:
            number = parse_number(item)
        except ValueError as error:
            raise BadValueError(str(error)) from None
        if everyone_holds(*number):
            raise BadValueError(
                f"{show(item)} is a device nearly every process holds (/dev/null, /dev/zero, /dev/urandom, "
                "a terminal): it is never a TPU device"
            )
        result.append(number_text(number))
    return tuple(dict.fromkeys(result))
