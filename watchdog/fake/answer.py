"""What the fake answers to one metadata GET: query parsing, rendering, and the wait_for_change rules.

Kept apart from the HTTP handler so the protocol rules are plain functions over a store.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from watchdog.fake.accounts import is_token
from watchdog.fake.store import Directory, Leaf, MetadataStore, Snapshot, Value

# The real server's hang limit without timeout_sec is undocumented; an hour keeps tests honest about
# always passing one.
DEFAULT_HANG_SECONDS = 3600
TEXT = "application/text"
JSON = "application/json"
METADATA_ROOT = "/computeMetadata/v1/"
# What the real server lists above /computeMetadata/v1/. Google's clients ping the root to learn they are on
# GCE: Go's without a Metadata-Flavor header, trusting the one in the answer; google-auth with one.
ABOVE_V1 = {"/": "computeMetadata/", "/computeMetadata/": "v1/"}
# Directories whose children are names (user attributes, account emails), never rewritten in camelCase.
_NAMED_CHILDREN = ("attributes", "guest-attributes", "service-accounts")


class QueryError(ValueError):
    """A query the real server answers with 400."""


@dataclass(frozen=True)
class Query:
    wait_for_change: bool = False
    recursive: bool = False
    alt: str | None = None  # "json" | "text" | None (the endpoint's default)
    last_etag: str | None = None
    timeout_sec: int | None = None


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    content_type: str = TEXT
    etag: str | None = None
    headers: tuple[tuple[str, str], ...] = field(default=())
    note: str = ""  # why, for the request log ("timeout", "stopped", ...)


def _flag(name: str, raw: str) -> bool:
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise QueryError(f"invalid value {raw!r} for {name}: expected true or false")


def parse_query(raw: str) -> Query:
    """The metadata parameters of a query string; QueryError (400) on a malformed one."""
    try:
        pairs = parse_qsl(raw, keep_blank_values=True)
    except ValueError as exc:
        raise QueryError(f"malformed query string: {exc}") from None
    params: dict[str, str] = {}
    for name, value in pairs:
        params.setdefault(name, value)
    alt = params.get("alt")
    if alt is not None and alt not in ("json", "text"):
        raise QueryError(f"invalid alt={alt!r}: expected json or text")
    timeout_sec: int | None = None
    if "timeout_sec" in params:
        raw_timeout = params["timeout_sec"]
        if not re.fullmatch(r"[0-9]{1,9}", raw_timeout):
            raise QueryError(f"invalid timeout_sec={raw_timeout!r}: expected a non-negative integer")
        timeout_sec = int(raw_timeout)
    return Query(
        wait_for_change=_flag("wait_for_change", params.get("wait_for_change", "false")),
        recursive=_flag("recursive", params.get("recursive", "false")),
        alt=alt,
        last_etag=params.get("last_etag"),
        timeout_sec=timeout_sec,
    )


def error(status: int, message: str, note: str = "") -> Answer:
    return Answer(status, (message.rstrip("\n") + "\n").encode(), TEXT, note=note or message)


def answer_above_v1(path: str) -> Answer | None:
    """The answer to GET of a path above /computeMetadata/v1/ (the root, /computeMetadata/, and both
    without their final slash); None for any other path."""
    if path in ABOVE_V1:
        return Answer(200, _lines([ABOVE_V1[path]]), TEXT)
    if path + "/" in ABOVE_V1 or path + "/" == METADATA_ROOT:
        return Answer(301, b"", TEXT, headers=(("Location", path + "/"),))
    return None


def answer_metadata(
    store: MetadataStore,
    path: str,
    query: Query,
    stop: threading.Event,
    abandoned: Callable[[], bool] | None = None,
) -> Answer:
    """The answer to GET /computeMetadata/v1/<path>?<query> (path relative, may end in '/')."""
    wants_directory = path == "" or path.endswith("/")
    try:
        snapshot = store.lookup(path)
    except ValueError:
        return error(404, "Not Found")
    if snapshot is None:
        return error(404, "Not Found")
    if isinstance(snapshot, Directory) and not wants_directory:
        return Answer(301, b"", TEXT, headers=(("Location", f"{METADATA_ROOT}{snapshot.key}/"),))
    if isinstance(snapshot, Leaf) and wants_directory:
        return error(404, "Not Found")
    note = ""
    if query.wait_for_change:
        if isinstance(snapshot, Directory) and not query.recursive:
            return error(400, "Non-recursive directory listings do not support wait_for_change")
        timeout = DEFAULT_HANG_SECONDS if query.timeout_sec is None else query.timeout_sec
        result = store.wait_for_change(path, query.last_etag, timeout, stop, abandoned)
        if result.outcome == "stopped":
            return error(503, "the fake metadata server is stopping", note="stopped")
        if result.outcome == "abandoned":
            return error(499, "client went away", note="abandoned")
        if result.snapshot is None:
            return error(404, "Not Found", note="deleted while waiting")
        snapshot = result.snapshot
        note = result.outcome
    answer = render(snapshot, query)
    return Answer(answer.status, answer.body, answer.content_type, answer.etag, answer.headers, note)


def render(snapshot: Snapshot, query: Query) -> Answer:
    """The body of a snapshot in the format the query asks for (or the endpoint's default)."""
    if isinstance(snapshot, Leaf):
        alt = query.alt or ("json" if is_token(snapshot.key) else None)
        return _render_leaf(snapshot.value, alt, snapshot.etag)
    if query.recursive:
        prefix = "" if snapshot.key == "" else snapshot.key + "/"
        # Tokens are left out of recursive answers, as on the real server.
        subtree = {rel: v for rel, v in snapshot.subtree.items() if not is_token(prefix + rel)}
        if query.alt == "text":
            lines = [
                f"{rel} {_text_scalar(v.content)}"
                for rel, v in sorted(subtree.items())
                if v.status == 200 and isinstance(v.content, str)
            ]
            return Answer(200, _lines(lines), TEXT, snapshot.etag)
        named = snapshot.key.rsplit("/", 1)[-1] in _NAMED_CHILDREN
        document = _nest(subtree, named_children=named)
        return Answer(200, json.dumps(document).encode(), JSON, snapshot.etag)
    if query.alt == "json":
        return Answer(200, json.dumps(list(snapshot.children)).encode(), JSON, snapshot.etag)
    return Answer(200, _lines(snapshot.children), TEXT, snapshot.etag)


def _render_leaf(value: Value, alt: str | None, etag: str) -> Answer:
    content = value.content
    if value.status != 200:
        # Error answers (upcoming-maintenance with nothing scheduled) are JSON whatever the alt.
        body = content if isinstance(content, str) else json.dumps(content)
        return Answer(value.status, body.encode(), JSON, etag)
    if alt == "json":
        return Answer(200, json.dumps(content).encode(), JSON, etag)
    if isinstance(content, str):
        return Answer(200, content.encode(), TEXT, etag)
    return Answer(200, _text_document(content).encode(), TEXT, etag)


_RFC3339_Z = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z$")


def _text_scalar(item: object) -> str:
    if isinstance(item, str):
        return _RFC3339_Z.sub(r"\1+00:00", item)
    if isinstance(item, bool):
        return "true" if item else "false"
    return json.dumps(item, separators=(",", ":"))


def _text_document(content: dict[str, Any] | list[Any]) -> str:
    """Google's text form of a JSON value: `key value` lines sorted by key, timestamps with +00:00, no
    final newline (as in Google's upcoming-maintenance fixture); a list gives one item per line."""
    if isinstance(content, dict):
        return "\n".join(f"{k} {_text_scalar(v)}" for k, v in sorted(content.items()))
    return "\n".join(_text_scalar(item) for item in content)


def _lines(items: list[str] | tuple[str, ...]) -> bytes:
    return "".join(f"{item}\n" for item in items).encode()


def _camel(name: str) -> str:
    head, *rest = name.split("-")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _nest(subtree: Mapping[str, Value], named_children: bool) -> dict[str, Any]:
    """Recursive JSON of a subtree: built-in names in camelCase as the real server writes them
    (maintenance-event -> maintenanceEvent), names (user attributes, account emails) as they are; error
    values left out."""
    document: dict[str, Any] = {}
    groups: dict[str, dict[str, Value]] = {}
    for rel, value in subtree.items():
        head, _, rest = rel.partition("/")
        if rest:
            groups.setdefault(head, {})[rest] = value
        elif value.status == 200:
            document[head if named_children else _camel(head)] = value.content
    for head, group in groups.items():
        document[head if named_children else _camel(head)] = _nest(group, head in _NAMED_CHILDREN)
    return document
