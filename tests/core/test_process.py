"""Process records: an identity is a PID and a start time together (a reused PID is another process), it
orders and prints as `pid@start`; a holder's PID is its identity's."""

from __future__ import annotations

import dataclasses

import pytest

from watchdog.core.process import Holder, ProcessIdentity


def test_a_reused_pid_is_another_process() -> None:
    first, reused = ProcessIdentity(4242, 1000), ProcessIdentity(4242, 1001)
    assert first != reused
    assert len({first, reused, ProcessIdentity(4242, 1000)}) == 2  # usable as dict keys and set members


def test_identities_order_by_pid_then_start_and_print_as_pid_at_start() -> None:
    identities = [ProcessIdentity(7, 2), ProcessIdentity(3, 9), ProcessIdentity(7, 1)]
    assert sorted(identities) == [ProcessIdentity(3, 9), ProcessIdentity(7, 1), ProcessIdentity(7, 2)]
    assert str(ProcessIdentity(4242, 123456)) == "4242@123456"  # the form logs and the state file show


def test_records_are_frozen() -> None:
    identity = ProcessIdentity(1, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        identity.pid = 3  # type: ignore[misc]
    holder = Holder(identity, "python3", ("python3", "train.py"), 0, ("/dev/accel0",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        holder.devices = ()  # type: ignore[misc]


def test_a_holder_is_known_by_its_identity() -> None:
    holder = Holder(ProcessIdentity(4242, 99), "python3", ("python3",), 1000, ("/dev/accel0",))
    assert holder.pid == 4242
    assert (holder.cgroup, holder.ppid) == ("", 0)  # unknown unless the scan says
