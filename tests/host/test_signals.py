"""Signalling real processes through pidfds: the identity is re-checked, a changed identity is never
signalled, dry runs deliver nothing, and the os.kill fallback keeps the same decisions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.workloads import Child, Workloads
from watchdog.core.process import ProcessIdentity
from watchdog.host.procfs import read_stat, start_time
from watchdog.host.signals import DryRunSignaller, PidfdSignaller, ProcessHandles, SignalResult


@pytest.fixture
def workloads(tmp_path: Path) -> Iterator[Workloads]:
    w = Workloads(tmp_path)
    yield w
    w.close()


@pytest.fixture(params=[True, False], ids=["pidfd", "kill-fallback"])
def handles(request: pytest.FixtureRequest) -> Iterator[ProcessHandles]:
    with ProcessHandles(use_pidfd=request.param) as h:
        yield h


def test_sends_to_the_identified_process_and_keeps_its_pidfd(
    workloads: Workloads, handles: ProcessHandles
) -> None:
    child = workloads.start("report")
    signaller = PidfdSignaller(handles)
    assert signaller.send(child.identity, signal.SIGTERM) is SignalResult.SENT
    child.expect("term")
    handle = handles.get(child.identity)
    assert handle is not None
    assert (handle.pidfd is not None) == handles.use_pidfd


def test_a_changed_identity_is_never_signalled(workloads: Workloads, handles: ProcessHandles) -> None:
    child = workloads.start("report")
    reused = ProcessIdentity(child.identity.pid, child.identity.start_time - 1)  # the PID, another process
    signaller = PidfdSignaller(handles)
    assert signaller.send(reused, signal.SIGTERM) is SignalResult.IDENTITY_CHANGED
    assert signaller.send(child.identity, signal.SIGUSR1) is SignalResult.SENT
    child.expect("usr1")  # the first thing it heard: the SIGTERM never arrived
    assert handles.get(reused) is None


def kernel_thread() -> ProcessIdentity:
    """A real kernel thread of this machine (kthreadd and its children carry PF_KTHREAD)."""
    for name in sorted(os.listdir("/proc"), key=lambda n: int(n) if n.isdigit() else 0):
        if name.isdigit() and (stat := read_stat(int(name))) is not None and stat.is_kernel_thread:
            return ProcessIdentity(int(name), stat.start_time)
    pytest.skip("no kernel thread visible in this PID namespace")


@pytest.mark.parametrize("who", ["pid 1", "itself", "kernel thread"])
def test_pid_1_itself_and_kernel_threads_are_never_signalled(handles: ProcessHandles, who: str) -> None:
    """The last line: even a holder list that names them (the scanner never does) sends nothing. SIGSTOP
    would show: a stopped PID 1 or test process would hang this test; the result says it was refused."""
    if who == "pid 1":
        start = start_time(1)
        identity = ProcessIdentity(1, start if start is not None else 0)
    elif who == "itself":
        start = start_time(os.getpid())
        assert start is not None
        identity = ProcessIdentity(os.getpid(), start)
    else:
        identity = kernel_thread()
    for signaller in (PidfdSignaller(handles), DryRunSignaller(handles)):
        assert signaller.send(identity, signal.SIGSTOP) is SignalResult.PROTECTED
    assert handles.get(identity) is None  # not even a pidfd was kept


def test_an_exited_process_is_gone(workloads: Workloads, handles: ProcessHandles) -> None:
    child = workloads.start("handled")
    identity = child.identity
    child.popen.kill()
    child.popen.wait(timeout=20)  # reaped: the PID is free
    assert PidfdSignaller(handles).send(identity, signal.SIGTERM) is SignalResult.GONE


def test_after_the_pidfd_is_held_a_reaped_process_is_gone_not_reused(workloads: Workloads) -> None:
    child = workloads.start("handled")
    with ProcessHandles() as handles:
        signaller = PidfdSignaller(handles)
        assert signaller.send(child.identity, 0) is SignalResult.SENT
        child.popen.kill()
        child.popen.wait(timeout=20)
        assert signaller.send(child.identity, signal.SIGTERM) is SignalResult.GONE


def test_dry_run_decides_the_same_and_delivers_nothing(workloads: Workloads, handles: ProcessHandles) -> None:
    child = workloads.start("report")
    dry = DryRunSignaller(handles)
    assert dry.dry_run
    assert dry.send(child.identity, signal.SIGTERM) is SignalResult.SENT
    assert dry.send(child.identity, signal.SIGKILL) is SignalResult.SENT
    reused = ProcessIdentity(child.identity.pid, child.identity.start_time + 1)
    assert dry.send(reused, signal.SIGTERM) is SignalResult.IDENTITY_CHANGED
    assert PidfdSignaller(handles).send(child.identity, signal.SIGUSR1) is SignalResult.SENT
    child.expect("usr1")
    assert child.alive()


DENIED_PROBE = """
import os, signal, sys
from watchdog.core.process import ProcessIdentity
from watchdog.host.signals import DryRunSignaller, PidfdSignaller, ProcessHandles
pid, start, use_pidfd = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
os.setuid(65534)
handles = ProcessHandles(use_pidfd=use_pidfd)
identity = ProcessIdentity(pid, start)
real = PidfdSignaller(handles).send(identity, signal.SIGTERM).value
dry = DryRunSignaller(handles).send(identity, signal.SIGTERM).value
sys.stdout.write(real + " " + dry)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to an unprivileged uid")
@pytest.mark.parametrize("use_pidfd", ["1", "0"])
def test_a_process_we_may_not_signal_is_denied(workloads: Workloads, use_pidfd: str) -> None:
    child = workloads.start("report")
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            DENIED_PROBE,
            str(child.identity.pid),
            str(child.identity.start_time),
            use_pidfd,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert probe.stdout == "denied denied"
    os.kill(child.identity.pid, signal.SIGUSR1)
    child.expect("usr1")


def test_handles_are_opened_once_and_closed(workloads: Workloads) -> None:
    child: Child = workloads.start("report")
    handles = ProcessHandles()
    first = handles.open(child.identity)
    assert handles.open(child.identity) is first
    handles.close()
    assert handles.get(child.identity) is None
