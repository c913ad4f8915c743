"""What systemd hears, and when: READY=1 once, when every key answered or at READY_WITHIN; WATCHDOG=1
every half WatchdogSec; STATUS= after a moment, never for a drain's own reports; a failing send counted,
never raised. The notifier is the real one; only its send is a list (the socket's tests: surface/)."""

from __future__ import annotations

from watchdog.core.drain_record import SignalResult
from watchdog.core.lifecycle import Lifecycle
from watchdog.core.moments import DaemonStarted, ProcessSignalled
from watchdog.core.process import ProcessIdentity
from watchdog.daemon.outputs import Outputs
from watchdog.daemon.systemd import READY_WITHIN, SystemdNotify
from watchdog.surface.metrics import Metrics
from watchdog.surface.notify import Notifier

ENV = {"NOTIFY_SOCKET": "@test", "WATCHDOG_USEC": "4000000"}


def systemd(sent: list[str], metrics: Metrics | None = None) -> SystemdNotify:
    """Two watched keys, none answered yet."""
    notifier = Notifier(ENV, lambda message: sent.append(message) or True)
    outputs = Outputs(metrics or Metrics())
    return SystemdNotify(notifier, outputs, lambda: "idle", started=100.0, watched=2)


def test_ready_goes_once_when_every_key_answered_and_pings_every_half_watchdog_sec() -> None:
    sent: list[str] = []
    s = systemd(sent)
    s.heard("instance/preempted")
    s.heard("instance/preempted")  # one key twice is still one
    s.tick(100.0)
    assert not any(m.startswith("READY=1") for m in sent)
    assert s.next_due() == [100.0 + READY_WITHIN, 102.0]
    s.heard("instance/maintenance-event")
    s.tick(101.0)
    s.tick(101.5)
    assert sum(m.startswith("READY=1") for m in sent) == 1
    assert sent.count("WATCHDOG=1") == 1  # the first at start; the next at +2 s
    s.tick(102.0)
    assert sent.count("WATCHDOG=1") == 2
    assert s.next_due() == [None, 104.0]


def test_ready_goes_at_ready_within_though_a_key_never_answered() -> None:
    sent: list[str] = []
    s = systemd(sent)
    s.heard("instance/preempted")
    s.tick(100.0 + READY_WITHIN - 0.1)
    assert not any(m.startswith("READY=1") for m in sent)
    s.tick(100.0 + READY_WITHIN)
    assert any(m.startswith("READY=1") for m in sent)


def test_status_follows_moments_but_not_a_drain_s_own_reports() -> None:
    sent: list[str] = []
    s = systemd(sent)
    s.told(DaemonStarted("idle", ("/dev/accel*",)), Lifecycle())
    signalled = ProcessSignalled(
        ProcessIdentity(4_300_000, 7),
        "job",
        15,
        SignalResult.SENT,
        "d",
        (),
        late=False,
        workload=None,
        dry_run=False,
    )
    s.told(signalled, Lifecycle())
    assert [m for m in sent if m.startswith("STATUS=")] == ["STATUS=idle"]


def test_a_send_that_raises_is_counted_and_the_loop_goes_on() -> None:
    metrics = Metrics()

    def broken(message: str) -> bool:
        raise RuntimeError("a bug in the sender")

    s = SystemdNotify(Notifier(ENV, broken), Outputs(metrics), lambda: "idle", started=0.0, watched=0)
    s.tick(0.0)  # READY=1 and WATCHDOG=1 both fail: neither raises
    s.stopping(drain_resumes=True)
    errors = metrics.registry.get_sample_value("tpu_watchdog_output_errors_total", {"output": "notify"})
    assert errors is not None
    assert errors >= 3
