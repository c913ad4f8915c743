"""core/devices.py: the rule's order (the floor, then the operator's numbers, then sysfs), the numbers, and
what is said of each verdict (real nodes and sysfs trees: tests/host/test_devices.py)."""

from __future__ import annotations

import pytest

from watchdog.core.devices import (
    GOOGLE_PCI_VENDOR,
    Judgement,
    MatchedDevice,
    SysfsFacts,
    Verdict,
    everyone_holds,
    judge,
    notes,
    parse_number,
)

MEM = SysfsFacts(True, subsystem="mem")


def test_the_floor_beats_the_operator_and_the_operator_beats_the_class() -> None:
    assert judge((1, 3), MEM, allowed=[(1, 3)]).verdict is Verdict.REFUSED  # /dev/null, even when named
    assert judge((136, 2), SysfsFacts(False), allowed=[(136, 2)]).verdict is Verdict.REFUSED  # a pty
    assert judge((1, 11), MEM).verdict is Verdict.REFUSED  # /dev/kmsg
    assert judge((1, 11), MEM, allowed=[(1, 11)]).verdict is Verdict.ALLOWED


def test_a_kernel_class_is_refused_even_with_a_google_parent_and_google_alone_is_a_tpu() -> None:
    google_misc = SysfsFacts(True, subsystem="misc", vendor=GOOGLE_PCI_VENDOR)
    assert judge((10, 61), google_misc).verdict is Verdict.REFUSED
    assert judge((240, 0), SysfsFacts(True, subsystem="odd", vendor=GOOGLE_PCI_VENDOR)).verdict is (
        Verdict.ACCELERATOR
    )
    assert judge(None, SysfsFacts(False)).verdict is Verdict.FILE


@pytest.mark.parametrize(
    ("number", "expected"), [((1, 3), True), ((1, 5), True), ((1, 9), True), ((4, 1), True), ((5, 0), True),
                             ((143, 7), True), ((1, 8), False), ((1, 11), False), ((144, 0), False)]
)  # fmt: skip
def test_everyone_holds_null_zero_urandom_and_terminals(number: tuple[int, int], expected: bool) -> None:
    assert everyone_holds(*number) is expected


def test_device_numbers_parse_as_sysfs_names_them() -> None:
    assert parse_number(" 245:0 ") == (245, 0)
    for bad in ("245", "245:", ":0", "-1:0", "245:0:1", "²:0", "4096:0", "0:1048576"):
        with pytest.raises(ValueError, match=repr(bad)):
            parse_number(bad)


def test_what_is_said_of_each_verdict() -> None:
    def matched(path: str, verdict: Verdict, why: str) -> MatchedDevice:
        return MatchedDevice(path, (240, 0), False, SysfsFacts(True), Judgement(verdict, why))

    said = notes([
        matched("/dev/accel0", Verdict.ACCELERATOR, "class accel: an accelerator"),
        matched("/dev/kmsg", Verdict.REFUSED, "class mem: one of the kernel's own devices"),
        matched("/dev/odd0", Verdict.UNKNOWN, "class odd, driver none: ..."),
        matched("/dev/full", Verdict.ALLOWED, "named in devices.allow_numbers"),
    ])  # fmt: skip
    assert said == [
        (True, "not a TPU device, never watched: /dev/kmsg (240:0): class mem: one of the kernel's own "
               "devices"),
        (True, "watched, but not identified as a TPU device: /dev/odd0 (240:0): class odd, driver none: ...; "
               'if it is none, narrow devices.patterns; if it is, add "240:0" to devices.allow_numbers'),
        (False, "watched by number: /dev/full (240:0): named in devices.allow_numbers"),
    ]  # fmt: skip
