"""The fake's control API under /_fake/ (a prefix no metadata path can have): change values, inject faults,
read the request log. No flavor header needed; these requests are not logged as metadata requests. Body
formats, fault fields and curl examples: docs/fake-metadata.md.

    PUT    /_fake/v1/<key>[?status=N]  body = the value (JSON for upcoming-maintenance or a JSON content type)
    GET    /_fake/v1/<key>             the stored value, status and ETag
    DELETE /_fake/v1/<key>             the key is gone (404 from then on); 404 if it was not there
    POST   /_fake/reset                {"path": KEY} or {} (everything) back to the defaults
    POST   /_fake/identity             {"node": "my-slice", "worker": 3, "hosts": 4, "accelerator_type":
                                       "v5litepod-16", "slice_id": 1, "num_slices": 2, ...}: every identity
                                       key of a TPU VM at once, consistent (watchdog/fake/vm_identity.py);
                                       {"machine_type": "a3-highgpu-8g", "zone": ...}: a GPU VM
    POST   /_fake/faults               {"kind": ..., "count": N, "status": 503, "seconds": 2.0, "path": KEY,
                                       "size": BYTES}
    GET    /_fake/faults               pending faults;  DELETE /_fake/faults clears them
    GET    /_fake/requests             recent metadata requests (bounded ring)
    GET    /_fake/hanging              {"hanging": N}: hanging GETs waiting now (is the job watching yet?)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from watchdog.fake.answer import JSON, Answer
from watchdog.fake.faults import Fault, FaultBook
from watchdog.fake.requestlog import RequestLog
from watchdog.fake.store import Leaf, MetadataStore, normalize_key, parse_value
from watchdog.fake.vm_identity import identity_from_fields

PREFIX = "/_fake/"
MAX_BODY = 1024 * 1024
SERVED = (
    "PUT, GET or DELETE /_fake/v1/<key>; POST /_fake/reset; POST /_fake/identity; "
    "POST, GET or DELETE /_fake/faults; GET /_fake/requests; GET /_fake/hanging"
)


@dataclass(frozen=True)
class ControlRequest:
    method: str
    path: str  # the URL path, starting with /_fake/
    query: str
    body: bytes
    content_type: str


def _reply(status: int, document: object) -> Answer:
    return Answer(status, (json.dumps(document) + "\n").encode(), JSON)


def _fail(status: int, message: str) -> Answer:
    return _reply(status, {"error": message})


def handle_control(
    request: ControlRequest, store: MetadataStore, faults: FaultBook, log: RequestLog
) -> Answer:
    route = request.path[len(PREFIX) :]
    try:
        if route.startswith("v1/"):
            return _value(request, route[len("v1/") :], store)
        if route == "reset":
            return _only("POST", request) or _reset(request, store)
        if route == "identity":
            return _only("POST", request) or _identity(request, store)
        if route == "faults":
            return _faults(request, faults)
        if route == "requests":
            return _only("GET", request) or _reply(200, [r.to_json() for r in log.records()])
        if route == "hanging":
            return _only("GET", request) or _reply(200, {"hanging": store.waiting()})
    except ValueError as exc:  # includes bad JSON and bad keys: the caller's mistake, said plainly
        return _fail(400, str(exc))
    return _fail(
        404, f"no control endpoint {request.path!r}; the control API serves {SERVED} (docs/fake-metadata.md)"
    )


def _only(method: str, request: ControlRequest) -> Answer | None:
    if request.method != method:
        return _fail(405, f"{request.path} takes {method}, not {request.method}")
    return None


def _json_body(request: ControlRequest) -> Any:
    if not request.body.strip():
        return {}
    try:
        return json.loads(request.body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"the body is not valid JSON: {exc}") from None


def _value(request: ControlRequest, raw_key: str, store: MetadataStore) -> Answer:
    key = normalize_key(raw_key)
    if key == "":
        raise ValueError("name a key: /_fake/v1/instance/maintenance-event")
    if request.method == "GET":
        snapshot = store.lookup(key)
        if not isinstance(snapshot, Leaf):
            return _fail(404, f"no value at {key!r}")
        value = snapshot.value
        return _reply(
            200, {"path": key, "value": value.content, "status": value.status, "etag": snapshot.etag}
        )
    if request.method == "DELETE":
        try:
            store.delete(key)
        except KeyError:
            return _fail(404, f"nothing to delete at {key!r}")
        return _reply(200, {"path": key, "deleted": True})
    if request.method == "PUT":
        status = _status_param(request.query)
        content = parse_value(key, request.body, request.content_type)
        changed = store.set(key, content, status=status)
        snapshot = store.lookup(key)
        etag = snapshot.etag if snapshot is not None else None
        return _reply(200, {"path": key, "changed": changed, "etag": etag})
    return _fail(405, f"{request.path} takes GET, PUT or DELETE, not {request.method}")


def _status_param(query: str) -> int:
    raw = dict(parse_qsl(query)).get("status", "200")
    if not raw.isdigit() or not 100 <= int(raw) <= 599:
        raise ValueError(f"status must be an HTTP status 100..599, not {raw!r}")
    return int(raw)


def _reset(request: ControlRequest, store: MetadataStore) -> Answer:
    document = _json_body(request)
    if not isinstance(document, dict) or set(document) - {"path"}:
        raise ValueError('reset takes {} (everything) or {"path": "instance/preempted"}')
    path = document.get("path")
    if path is not None and not isinstance(path, str):
        raise ValueError(f"reset path must be a string, not {path!r}")
    changed = store.reset(path)
    return _reply(200, {"reset": path if path is not None else "everything", "changed": changed})


def _identity(request: ControlRequest, store: MetadataStore) -> Answer:
    document = _json_body(request)
    if not isinstance(document, dict):
        raise ValueError('identity takes a JSON object: {"node": "my-slice", "worker": 3, "hosts": 4}')
    identity = identity_from_fields(document)
    changed = store.set_identity(identity)
    return _reply(200, {"identity": identity.values(), "changed": changed})


def _faults(request: ControlRequest, faults: FaultBook) -> Answer:
    if request.method == "GET":
        return _reply(200, [f.to_json() for f in faults.pending()])
    if request.method == "DELETE":
        faults.clear()
        return _reply(200, {"cleared": True})
    if request.method == "POST":
        try:
            fault = Fault.from_json(_json_body(request))
        except TypeError as exc:
            raise ValueError(f"bad fault: {exc}") from None
        faults.add(fault)
        return _reply(200, {"added": fault.to_json()})
    return _fail(405, f"{request.path} takes GET, POST or DELETE, not {request.method}")
