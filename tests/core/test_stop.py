"""The daemon's stop: what must happen at once is done by the setter, with no thread waiting to pass it on."""

from __future__ import annotations

import threading

import pytest

from watchdog.core.stop import Stop


def test_set_runs_each_callback_once_in_the_setter_s_thread_in_order() -> None:
    stop, ran = Stop(), []
    stop.on_set(lambda: ran.append(("first", threading.current_thread().name)))
    stop.on_set(lambda: ran.append(("second", threading.current_thread().name)))
    assert ran == []
    setter = threading.Thread(target=stop.set, name="setter")
    setter.start()
    setter.join()
    assert stop.is_set()
    assert ran == [("first", "setter"), ("second", "setter")]
    stop.set()  # set already: nothing runs twice
    assert len(ran) == 2


def test_a_callback_given_after_the_stop_runs_at_once() -> None:
    stop, ran = Stop(), []
    stop.set()
    stop.on_set(lambda: ran.append("late"))
    assert ran == ["late"]


def test_a_failing_callback_leaves_the_stop_set_and_the_others_run() -> None:
    stop, ran = Stop(), []

    def broken() -> None:
        raise OSError("socket already gone")

    stop.on_set(broken)
    stop.on_set(lambda: ran.append("after"))
    with pytest.raises(OSError, match="socket already gone"):
        stop.set()
    assert stop.is_set()
    assert stop.wait(0)
    assert ran == ["after"]
