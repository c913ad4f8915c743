"""The guard around every output: an exception ends the block only, is counted by output, and is logged
once per place it happens, even when logging is what fails."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from watchdog.core.vocabulary import Output
from watchdog.daemon.outputs import Outputs
from watchdog.surface.metrics import OUTPUTS, Metrics


def errors(metrics: Metrics, output: str) -> float | None:
    return metrics.registry.get_sample_value("tpu_watchdog_output_errors_total", {"output": output})


def fail(outputs: Outputs, output: Output) -> bool:
    """One failing output; True once the caller goes on past it."""
    with outputs.guarded(output):
        raise ValueError("year 33715 is out of range")
    return True


def test_every_output_has_its_series_from_start_up() -> None:
    metrics = Metrics()
    assert [Output(o) for o in OUTPUTS] == list(Output)
    assert all(errors(metrics, o) == 0 for o in OUTPUTS)


def test_a_failure_is_swallowed_counted_and_logged_once_per_place(caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()
    outputs = Outputs(metrics)
    for _ in range(3):
        assert fail(outputs, Output.LOG)
    assert fail(outputs, Output.WEBHOOKS)
    assert errors(metrics, "log") == 3
    assert errors(metrics, "webhooks") == 1
    said = [r for r in caplog.records if "output failed" in r.getMessage()]
    assert [r.getMessage().split()[1] for r in said] == ["log", "webhooks"]
    assert all(r.levelno == logging.ERROR and r.exc_info for r in said)
    assert "year 33715 is out of range" in said[0].getMessage()


class Broken(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        raise RuntimeError("the journal is gone")


@pytest.fixture
def broken_log() -> Iterator[None]:
    logger = logging.getLogger("tpu-watchdog")
    handler = Broken()
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def test_when_logging_itself_fails_the_failure_is_still_counted(broken_log: None) -> None:
    metrics = Metrics()
    outputs = Outputs(metrics)
    with outputs.guarded(Output.LOG):
        logging.getLogger("tpu-watchdog").warning("event started: ...")
    assert errors(metrics, "log") == 1


def test_a_stop_is_never_swallowed() -> None:
    outputs = Outputs(Metrics())
    with pytest.raises(KeyboardInterrupt), outputs.guarded(Output.LOG):
        raise KeyboardInterrupt
