"""What the daemon says about its inputs and its state file: metrics, /status fields and log lines, each
said once per change rather than once per retry. Called from the loop only: every value is replaced whole,
never mutated, so HTTP threads read old or new. The /status value comes first, and each metric and log
line is guarded (`Outputs`): none can stop the caller."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from watchdog.core.identity import HostIdentity
from watchdog.core.metadata_values import (
    MaintenanceEvent,
    MaintenanceKind,
    Preempted,
    UpcomingMaintenance,
    WatchedValue,
)
from watchdog.core.process import Holder, ProcessIdentity
from watchdog.core.vocabulary import (
    MAINTENANCE_EVENT,
    UPCOMING_MAINTENANCE,
    Output,
    SigtermDisposition,
    source_of,
)
from watchdog.daemon.outputs import Outputs
from watchdog.daemon.view import StatusView
from watchdog.metadata.errors import ErrorKind
from watchdog.metadata.watch import WatchFailed, WatchStatus
from watchdog.store.address import remove_listen_address, write_listen_address
from watchdog.store.statefile import StateStore
from watchdog.surface.httpapi import BIND_RETRY
from watchdog.surface.logs import fields, workload_fields
from watchdog.surface.metrics import Metrics

log = logging.getLogger("tpu-watchdog")

# An error kind (metadata/errors.py) in words, for the log line; a kind without words here is said by
# its name ("http_429" -> "http 429").
_WORDS = {
    ErrorKind.CONNECTION_REFUSED: "connection refused",
    ErrorKind.CONNECTION_RESET: "connection reset",
    ErrorKind.TIMEOUT: "timed out",
    ErrorKind.HTTP_5XX: "server error",
    ErrorKind.HTTP_429: "too many requests",
    ErrorKind.HTTP_403: "forbidden",
    ErrorKind.HTTP_404: "not found",
    ErrorKind.HTTP_4XX: "request refused",
    ErrorKind.BODY_NOT_TEXT: "the answer is not text",
    ErrorKind.BODY_TOO_LARGE: "the answer is too large",
    ErrorKind.MISSING_FLAVOR: "answer refused",
    ErrorKind.MALFORMED_VALUE: "malformed value",
    ErrorKind.OTHER: "request failed",
}


def in_words(kind: ErrorKind) -> str:
    return _WORDS.get(kind, kind.value.replace("_", " "))


class Reporter:
    def __init__(
        self, metrics: Metrics, view: StatusView, store: StateStore, unknown_event_action: str,
        outputs: Outputs,
    ) -> None:  # fmt: skip
        self.metrics, self.view, self.store, self.outputs = metrics, view, store, outputs
        self.unknown_event_action = unknown_event_action
        self._last_error_kind: dict[str, str] = {}
        self._unready: set[tuple[ProcessIdentity, SigtermDisposition]] = set()  # at the last idle scan
        self._said_unready: set[tuple[ProcessIdentity, SigtermDisposition]] = set()
        self._failed_binds = 0  # of the HTTP listener, since start

    def metadata_failed(self, message: WatchFailed) -> None:
        """Counted every time; a warning per change of error kind per key, the repeats only at debug (and
        a 404 at debug: the watch says once that the key is not supported here)."""
        error = message.error
        kind = error.kind.value
        repeat = self._last_error_kind.get(message.key) == kind or kind == ErrorKind.HTTP_404.value
        self._last_error_kind[message.key] = kind
        with self.outputs.guarded(Output.METRICS):
            self.metrics.metadata_errors.labels(source_of(message.key), kind).inc()
        with self.outputs.guarded(Output.LOG):
            log.log(
                logging.DEBUG if repeat else logging.WARNING,
                "metadata %s: %s (%s); retrying, never taken as a value",
                message.key, in_words(error.kind), error.detail,
                extra=fields("metadata_error", endpoint=source_of(message.key), error_kind=kind),
            )  # fmt: skip

    def metadata_heard(self, statuses: Iterable[WatchStatus]) -> None:
        """When the metadata server last answered well (an unchanged hanging-GET timeout too): the watches
        keep the time; the gauge follows."""
        heard = max((s.last_success or 0.0 for s in statuses), default=0.0)
        if heard:
            with self.outputs.guarded(Output.METRICS):
                self.metrics.metadata_last_success.set(heard)

    def identity_learned(self, identity: HostIdentity) -> None:
        """The instance's identity (its own thread): /status and `tpu_watchdog_host_info`."""
        self.view.identity = identity
        with self.outputs.guarded(Output.METRICS):
            self.metrics.set_host_info(identity.labels())

    def metadata_value(self, key: str, value: WatchedValue) -> None:
        """A good answer: the value in /status, and its metrics."""
        self._last_error_kind.pop(key, None)
        self.view.values = {**self.view.values, source_of(key): value}
        if isinstance(value, MaintenanceEvent) and value.kind is MaintenanceKind.UNKNOWN:
            with self.outputs.guarded(Output.LOG):
                log.warning(
                    "%s has a value this version does not know: %r; policy: %s",
                    MAINTENANCE_EVENT.source,
                    value.raw,
                    self.unknown_event_action,
                )
        with self.outputs.guarded(Output.METRICS):
            self._value_metrics(value)

    def _value_metrics(self, value: WatchedValue) -> None:
        if isinstance(value, MaintenanceEvent):
            self.metrics.set_maintenance_event(value.raw)
        elif isinstance(value, Preempted):
            self.metrics.preempted.set(1 if value.preempted else 0)
        elif isinstance(value, UpcomingMaintenance):
            notice = value.notice
            start = notice.window_start.timestamp() if notice and notice.window_start else None
            end = notice.window_end.timestamp() if notice and notice.window_end else None
            self.metrics.set_window(start, end)

    def holders_now(self, holders: Sequence[Holder]) -> None:
        """Who holds a device now, in /status `holders` and the holder gauges: the one place that says it,
        from every scan (the index's, a drain's, the late-arrival watch's) and every departure, so both
        follow a drain (exits, late arrivals) rather than the last idle scan."""
        self.view.holders = list(holders)
        with self.outputs.guarded(Output.METRICS):
            self.metrics.set_holders(holders)

    def holders_scanned(self, holders: Sequence[Holder]) -> None:
        """An idle scan: /status, the holder gauges, and a warning, once per process, for a holder whose
        SIGTERM has been at its default or ignored at two scans in a row (a JAX job shows default until it
        reaches jax.distributed.initialize(); the alert waits 10 minutes for the same reason)."""
        self.holders_now(holders)
        unready = {(h.identity, h.sigterm): h for h in holders
                   if h.sigterm in (SigtermDisposition.DEFAULT, SigtermDisposition.IGNORED)}  # fmt: skip
        for key, h in unready.items():
            if key in self._unready and key not in self._said_unready:
                self._said_unready.add(key)
                words = h.workload.describe()
                with self.outputs.guarded(Output.LOG):
                    log.warning(
                        "pid %d (%s%s) holds the TPU with SIGTERM %s: %s; `tpu-watchdog readiness` says more",
                        h.pid, h.name, f", {words}" if words else "", key[1].value,
                        "it will die at the next maintenance before any save (a JAX job needs "
                        "jax.distributed.initialize())" if key[1] is SigtermDisposition.DEFAULT
                        else "it will run on until SIGKILL at the drain deadline, saving nothing",
                        extra=fields("holder_not_ready", pid=h.pid, process=h.name, sigterm=key[1].value,
                                     **workload_fields(h.workload)),
                    )  # fmt: skip
        self._unready = set(unready)
        self._said_unready &= self._unready  # only processes still holding are remembered

    def metadata_unsupported(self, key: str) -> bool:
        """A 404: the key's last value is no longer announced, so it leaves /status and its metrics (an
        upcoming-maintenance window must not stay on the dashboard, nor drive drain_before_window).
        True if the key had answered in this run (a passing 404, then)."""
        source = source_of(key)
        answered = source in self.view.values
        self.view.values = {name: value for name, value in self.view.values.items() if name != source}
        if source == UPCOMING_MAINTENANCE.source:
            with self.outputs.guarded(Output.METRICS):
                self.metrics.set_window(None, None)
        return answered

    def persistence(self) -> None:
        """A state file that cannot be written is loud: metric, /status, STATUS=, and an error per change.
        The drain goes on from memory either way (any thread may call this)."""
        error = self.store.write_error
        why = None if error is None else f"{self.store.path}: {error.strerror or error}"
        if why == self.view.state_error:
            return
        self.view.state_error = why
        with self.outputs.guarded(Output.METRICS):
            self.metrics.state_persisted.set(0 if why else 1)
        with self.outputs.guarded(Output.LOG):
            if why:
                log.error(
                    "STATE IS NOT PERSISTED (%s): draining from memory; a restart now would forget this "
                    "drain", why, extra=fields("state_not_persisted"),
                )  # fmt: skip
            else:
                log.warning("state is persisted again: %s", self.store.path, extra=fields("state_persisted"))

    def listener(self, address: str, error: str | None) -> bool:
        """An attempt to bind the HTTP listener (any thread): a failed one is counted (output `http`); a
        change is said in /status and the journal. Where it listens is kept in the state dir, for
        `tpu-watchdog status` (store/address.py). True on a change (for STATUS=)."""
        with self.outputs.guarded(Output.STATUS):
            if error is None:
                write_listen_address(self.store.dir, address)
            else:
                remove_listen_address(self.store.dir)
        if error is not None:
            self._failed_binds += 1
            with self.outputs.guarded(Output.METRICS):
                self.metrics.output_errors.labels(Output.HTTP.value).inc()
        failed_before, listening = self.view.http_error is not None, self.view.http["address"] is not None
        self.view.http = {**self.view.http, "address": None if error else address, "error": error,
                          "failed_binds": self._failed_binds}  # fmt: skip
        if error == self.view.http_error and (error is not None or listening):
            return False
        self.view.http_error = error
        with self.outputs.guarded(Output.LOG):
            if error is not None:
                log.error(
                    "cannot listen on %s: %s; protecting this host all the same, without /metrics and "
                    "/status, and binding again every %.0f s until it can (listen = in the config file, or "
                    "--listen)", address, error, BIND_RETRY,
                )  # fmt: skip
            else:
                log.log(
                    logging.WARNING if failed_before else logging.INFO,
                    "HTTP on http://%s (/metrics /livez /healthz /readyz /status)%s", address,
                    ": listening after all" if failed_before else "",
                )  # fmt: skip
        return True
