"""The fake's metadata values: a tree of keys, content-derived ETags, and hanging waits on a Condition.

ETags are a hash of the content, so they change exactly when the content changes (setting the same value
again wakes nobody), and they are never "0" (which clients use to force an immediate answer).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from watchdog.fake.accounts import account_keys, is_token
from watchdog.fake.vm_identity import IDENTITY_KEYS, PROJECT, PROJECT_NUMBER, TpuIdentity, VmIdentity

# A value as a user sets it: plain text, or a JSON document (dict/list) such as upcoming-maintenance.
MetadataValue = str | dict[str, Any] | list[Any]

# Keys whose values are JSON documents when set from text (a control body, a command-line argument), beside
# every service account's token (accounts.is_token).
JSON_KEYS = frozenset({"instance/upcoming-maintenance"})
NO_NOTIFICATIONS = {"error": "no notifications have been received yet, try again later"}


@dataclass(frozen=True)
class Value:
    """What one leaf key answers: its content and the HTTP status it is served with."""

    content: MetadataValue
    status: int = 200


# A one-host v4-8 slice: every identity key of a real TPU VM, consistent (fake/vm_identity.py), and the
# Compute default service account (fake/accounts.py).
DEFAULT_IDENTITY = TpuIdentity(instance_id="4520031799277581759", instance_name="t1v-n-fake-w-0")
DEFAULTS: Mapping[str, Value] = {
    **{path: Value(text) for path, text in DEFAULT_IDENTITY.values().items()},
    **{path: Value(content) for path, content in account_keys().items()},
    "instance/maintenance-event": Value("NONE"),
    "instance/preempted": Value("FALSE"),
    "instance/upcoming-maintenance": Value(NO_NOTIFICATIONS, status=503),
    "instance/scheduling/preemptible": Value("FALSE"),
    "instance/scheduling/automatic-restart": Value("TRUE"),
    "project/project-id": Value(PROJECT),
    "project/numeric-project-id": Value(PROJECT_NUMBER),
    "universe/universe-domain": Value("googleapis.com"),
}

_SEGMENT = re.compile(r"^[A-Za-z0-9._~@-]+$")


def normalize_key(path: str) -> str:
    """`path` without surrounding slashes, checked: only plain segments (no '..', no empty ones)."""
    key = path.strip("/")
    if key == "":
        return ""
    for segment in key.split("/"):
        if not _SEGMENT.match(segment) or segment in (".", ".."):
            raise ValueError(f"invalid metadata key {path!r}: bad segment {segment!r}")
    return key


def parse_value(key: str, body: bytes, content_type: str = "") -> MetadataValue:
    """A value from a control body: JSON for JSON keys (upcoming-maintenance) or a JSON content type,
    otherwise the UTF-8 text as it is."""
    try:
        text = body.decode()
    except UnicodeDecodeError:
        raise ValueError(f"the value for {key!r} is not UTF-8 text") from None
    if key not in JSON_KEYS and not is_token(key) and not content_type.lower().startswith("application/json"):
        return text
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the value for {key!r} must be JSON: {exc}") from None
    if not isinstance(document, (str, dict, list)):
        raise ValueError(f"the value for {key!r} must be a JSON object, array or string")
    return document


def _etag(document: object) -> str:
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Leaf:
    """A snapshot of one leaf key."""

    key: str
    value: Value
    etag: str


@dataclass(frozen=True)
class Directory:
    """A snapshot of a directory: its direct children (sub-directories end in '/') and its whole subtree,
    relative paths to values."""

    key: str
    children: tuple[str, ...]
    subtree: Mapping[str, Value]
    etag: str


Snapshot = Leaf | Directory
WaitOutcome = Literal["changed", "timeout", "stopped", "abandoned"]


@dataclass(frozen=True)
class WaitResult:
    snapshot: Snapshot | None  # None: the key was deleted while waiting
    outcome: WaitOutcome


class MetadataStore:
    """The values the fake serves; every change notifies the Condition that hanging requests wait on."""

    def __init__(self, defaults: Mapping[str, Value] = DEFAULTS) -> None:
        self._defaults = dict(defaults)
        self._values: dict[str, Value] = dict(defaults)
        self._cond = threading.Condition()
        self._waiting = 0
        self._expired = 0  # how many times expire_waits() has run: a wait begun before it has timed out

    # --- changes -------------------------------------------------------------------------------------
    def set(self, path: str, content: MetadataValue, status: int = 200) -> bool:
        """Set a leaf (created if new). True when the content changed (and waiters were woken)."""
        if not isinstance(content, (str, dict, list)):
            raise TypeError(f"a metadata value is a str, dict or list, not {type(content).__name__}")
        json.dumps(content)  # fails early (TypeError/ValueError) on what could never be served
        key = normalize_key(path)
        if key == "":
            raise ValueError("cannot set the metadata root")
        with self._cond:
            if any(k.startswith(key + "/") for k in self._values):
                raise ValueError(f"{key!r} is a directory; set one of its keys instead")
            parts = key.split("/")
            for i in range(1, len(parts)):
                if "/".join(parts[:i]) in self._values:
                    raise ValueError(f"{'/'.join(parts[:i])!r} is a value, it cannot have child keys")
            return self._replace({key: Value(content, status)}, ())

    def set_identity(self, identity: VmIdentity) -> list[str]:
        """Every key of a VM's identity at once, consistent (fake/vm_identity.py): the identity keys it does
        not serve are removed (a GPU VM after a TPU VM has no TPU attributes). The paths that changed."""
        values = {path: Value(text) for path, text in identity.values().items()}
        with self._cond:
            gone = [path for path in IDENTITY_KEYS if path not in values and path in self._values]
            changed = [path for path, value in values.items() if self._values.get(path) != value]
            self._replace(values, gone)
        return changed + sorted(gone)

    def reset(self, path: str | None = None) -> bool:
        """Back to the defaults: everything, or one key (or directory subtree). A key with no default is
        removed. True when anything changed."""
        with self._cond:
            if path is None:
                return self._replace(self._defaults, tuple(self._values))
            key = normalize_key(path)
            inside = _under(key)
            current = [k for k in self._values if inside(k)]
            defaults = {k: v for k, v in self._defaults.items() if inside(k)}
            return self._replace(defaults, current)

    def delete(self, path: str) -> None:
        """Remove a key or a directory subtree, so it answers 404; KeyError when nothing is there."""
        key = normalize_key(path)
        with self._cond:
            doomed = [k for k in self._values if _under(key)(k)]
            if not doomed:
                raise KeyError(key)
            self._replace({}, doomed)

    def _replace(self, new: Mapping[str, Value], remove: tuple[str, ...] | list[str]) -> bool:
        before = dict(self._values)
        for k in remove:
            self._values.pop(k, None)
        self._values.update(new)
        changed = self._values != before
        if changed:
            self._cond.notify_all()
        return changed

    # --- reads ---------------------------------------------------------------------------------------
    def lookup(self, path: str) -> Snapshot | None:
        """The key's current snapshot, or None when it does not exist."""
        key = normalize_key(path)
        with self._cond:
            return self._snapshot(key)

    def wait_for_change(
        self,
        path: str,
        last_etag: str | None,
        timeout: float,
        stop: threading.Event,
        abandoned: Callable[[], bool] | None = None,
        check_every: float = 1.0,
    ) -> WaitResult:
        """Hang until the key's ETag differs from `last_etag` (from the current one when None), the timeout
        passes, `stop` is set (wake it with `wake_all`), or `abandoned()` says the client went away (asked
        every `check_every` s; changes themselves wake the wait through the Condition, never by polling)."""
        key = normalize_key(path)
        deadline = time.monotonic() + timeout
        with self._cond:
            self._waiting += 1
            try:
                return self._wait(key, last_etag, deadline, stop, abandoned, check_every, self._expired)
            finally:
                self._waiting -= 1

    def _wait(
        self,
        key: str,
        last_etag: str | None,
        deadline: float,
        stop: threading.Event,
        abandoned: Callable[[], bool] | None,
        check_every: float,
        expired: int,
    ) -> WaitResult:
        snapshot = self._snapshot(key)
        if last_etag is None:
            last_etag = _etag_of(snapshot)
        while True:
            if _etag_of(snapshot) != last_etag:
                return WaitResult(snapshot, "changed")
            if stop.is_set():
                return WaitResult(snapshot, "stopped")
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._expired != expired:
                return WaitResult(snapshot, "timeout")
            if not self._cond.wait(min(remaining, check_every)) and abandoned is not None and abandoned():
                return WaitResult(snapshot, "abandoned")
            snapshot = self._snapshot(key)

    def waiting(self) -> int:
        """How many hanging waits are in progress (tests wait for a client to be hanging)."""
        with self._cond:
            return self._waiting

    def expire_waits(self) -> None:
        """End every hanging wait in progress as if its timeout had just passed: each answers the current
        value, unchanged, at once (waits begun afterwards hang as usual). Lets a test skip the idle rest of
        a hanging GET, e.g. to have the next request meet a fault it just added."""
        with self._cond:
            self._expired += 1
            self._cond.notify_all()

    def wake_all(self) -> None:
        """Wake every hanging wait so it re-checks its stop event."""
        with self._cond:
            self._cond.notify_all()

    def _snapshot(self, key: str) -> Snapshot | None:
        value = self._values.get(key)
        if value is not None:
            return Leaf(key, value, _etag([value.status, value.content]))
        prefix = "" if key == "" else key + "/"
        subtree = {k[len(prefix) :]: v for k, v in self._values.items() if k.startswith(prefix)}
        if not subtree:
            return None
        children = sorted({rel.split("/")[0] + ("/" if "/" in rel else "") for rel in subtree})
        document = sorted([rel, v.status, v.content] for rel, v in subtree.items())
        return Directory(key, tuple(children), subtree, _etag(document))


def _under(key: str) -> Callable[[str], bool]:
    if key == "":
        return lambda k: True
    return lambda k: k == key or k.startswith(key + "/")


def _etag_of(snapshot: Snapshot | None) -> str:
    return "absent" if snapshot is None else snapshot.etag
