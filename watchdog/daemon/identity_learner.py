"""Learn this host's identity at start, in a thread of its own: the watches never wait for it.

Each key is asked until it answers (a value, or a 404: not there), with a backoff from 1 s to 60 s, so a
metadata server that is down at boot only delays the labels. What is known is published at once (the
metric, /status, `StatusView.identity` for history and webhooks) and again as more arrives. Each failure kind
per key and each problem with a value is said once; none of them stops anything, and a line that raises
(a broken journal) is counted in `Outputs` and ends neither the thread nor the asking.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from watchdog.core.identity import IDENTITY_PATHS, HostIdentity, identity_from
from watchdog.core.vocabulary import Output
from watchdog.daemon.outputs import Outputs
from watchdog.metadata.identity import Fetched

log = logging.getLogger("tpu-watchdog")

FIRST_RETRY = 1.0
LAST_RETRY = 60.0

Fetch = Callable[[Sequence[str]], Fetched]


def learn_identity(
    fetch: Fetch,
    publish: Callable[[HostIdentity], None],
    stop: threading.Event,
    first_retry: float = FIRST_RETRY,
    *,
    outputs: Outputs,
) -> None:
    """Ask for every identity key until each has answered or `stop` is set; publish each change."""
    answers: dict[str, str | None] = {}
    said: set[str] = set()
    published: HostIdentity | None = None
    delay = first_retry
    pending = list(IDENTITY_PATHS)
    while pending and not stop.is_set():
        try:
            fetched = fetch(pending)
        except Exception:  # a bug here must not end the daemon, nor the asking: logged whole, once
            if "bug" not in said:
                said.add("bug")
                with outputs.guarded(Output.LOG):
                    log.exception("host identity: internal error while asking for it: asking again")
            fetched = Fetched()
        answers.update(fetched.values)
        by_kind: dict[str, list[str]] = {}  # one line per kind of failure, not per key: one fact
        for path, error in fetched.failed.items():
            by_kind.setdefault(error.kind.value, []).append(path)
        for kind, paths in by_kind.items():
            detail = fetched.failed[paths[0]].detail
            _once(outputs, said, f"host identity: {', '.join(paths)} unavailable ({kind}): asking again",
                  detail, key=f"unavailable: {kind}")  # fmt: skip
        identity, problems = identity_from(answers)
        for problem in problems:
            _once(outputs, said, f"host identity: {problem}")
        if identity != published:
            publish(identity)
            published = identity
        pending = [path for path in pending if path not in answers]
        if pending:
            stop.wait(delay)
            delay = min(delay * 2, LAST_RETRY)
    if published is not None and not pending:
        missing = [f for f, v in published.labels().items() if not v]
        shown = " ".join(f"{k}={v}" for k, v in published.to_dict().items()) or "none"
        with outputs.guarded(Output.LOG):
            log.info("host identity: %s%s", shown, f" (unknown: {', '.join(missing)})" if missing else "")


def _once(outputs: Outputs, said: set[str], message: str, detail: str = "", key: str = "") -> None:
    with outputs.guarded(Output.LOG):
        if (key or message) in said:
            log.debug("%s %s", message, detail)
            return
        said.add(key or message)
        log.warning("%s%s", message, f": {detail}" if detail else "")
