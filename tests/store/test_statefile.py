"""The state file on a real directory: round trips, write-ahead across a real crash, bad files set aside."""

from __future__ import annotations

import json
import logging
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from watchdog.core.lifecycle import ActiveDrain, Event
from watchdog.core.process import ProcessIdentity
from watchdog.store.records import ExitRecord, Intent, SavedState, SignalRecord
from watchdog.store.statefile import STATE_FILE, StateDirError, StateStore, read_boot_id

BOOT = "6a1d0c52-0000-4000-8000-000000000001"
TERM = ProcessIdentity(4242, 987654)
OTHER = ProcessIdentity(4343, 987700)


class StepClock:
    """Wall time that moves one second per reading, so every record has a distinct, known time."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        self.now += 1.0
        return self.now


def store(path: Path, boot_id: str = BOOT) -> StateStore:
    return StateStore(str(path), boot_id=boot_id, clock=StepClock())


def begin(
    s: StateStore, source: str = "maintenance-event", value: str = "TERMINATE_ON_HOST_MAINTENANCE",
    event_id: str = "ev-1", started_at: float = 10.0,
) -> Event:  # fmt: skip
    """An event and its drain, as the daemon saves them (the lifecycle's own, unconfirmed as on file)."""
    event = Event(event_id, source, value, started_at, confirmed=False)
    drain = ActiveDrain([event_id], started_at, started_at + 300.0)
    s.save_lifecycle([event], drain, None, on_timeout="kill")
    return event


def test_round_trip(tmp_path: Path) -> None:
    first = store(tmp_path)
    event = begin(first)
    first.record_intent(TERM, signal.SIGTERM, name="python3")
    first.record_sent(TERM, signal.SIGTERM, "sent")
    first.record_intent(OTHER, "SIGTERM", name="trainer")
    assert first.state.drain is not None
    first.save_lifecycle([event], first.state.drain, None, on_timeout="leave")

    again = store(tmp_path)
    assert again.state == first.state
    assert again.state.events == (event,)
    assert again.state.drain is not None
    assert again.state.drain.event_ids == ["ev-1"]
    assert again.state.on_timeout == "leave"
    sent = again.state.find(TERM, signal.SIGTERM)
    assert sent is not None
    assert (sent.name, sent.result, sent.confirmed) == ("python3", "sent", True)
    assert [s.identity for s in again.state.unconfirmed()] == [OTHER]


def test_the_saved_state_is_what_the_file_says_not_the_lifecycles_live_objects(tmp_path: Path) -> None:
    """The lifecycle goes on changing its events and drain after a save: the store keeps copies, as a
    reload would give them back (unconfirmed, not cancelling)."""
    s = store(tmp_path)
    event = Event("ev-1", "maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE", 10.0, deadline=310.0)
    drain = ActiveDrain(["ev-1"], 10.0, 310.0, cancelling=True)
    s.save_lifecycle([event], drain, None, on_timeout="kill")
    event.deadline, drain.deadline = 40.0, 40.0
    drain.event_ids.append("ev-2")
    assert s.state.events[0].deadline == 310.0
    assert s.state.drain == ActiveDrain(["ev-1"], 10.0, 310.0, drain_id=drain.drain_id)
    assert not s.state.events[0].confirmed
    assert store(tmp_path).state == s.state


def test_an_intent_survives_a_real_crash_before_the_signal(tmp_path: Path) -> None:
    """A child process records the intent and is SIGKILLed before it can mark the signal sent."""
    script = textwrap.dedent(
        f"""
        import os, signal
        from watchdog.core.process import ProcessIdentity
        from watchdog.core.lifecycle import ActiveDrain, Event
        from watchdog.store.statefile import StateStore
        s = StateStore({str(tmp_path)!r}, boot_id={BOOT!r})
        s.save_lifecycle([Event("ev-crash", "preempted", "TRUE", 1.0)],
                         ActiveDrain(["ev-crash"], 1.0, 26.0), None, on_timeout="kill")
        s.record_intent(ProcessIdentity({TERM.pid}, {TERM.start_time}), signal.SIGTERM, name="trainer")
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=30, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr

    resumed = store(tmp_path)
    assert [e.event_id for e in resumed.state.events] == ["ev-crash"]
    assert resumed.already_signalled(TERM, signal.SIGTERM)  # possibly sent: never SIGTERM twice
    assert not resumed.already_signalled(TERM, signal.SIGKILL)
    (intent,) = resumed.state.unconfirmed()
    assert (intent.identity, intent.signal, intent.sent_at) == (TERM, "SIGTERM", None)


def test_the_processes_ends_are_kept_with_their_drain_and_go_with_it(tmp_path: Path) -> None:
    s = store(tmp_path)
    begin(s)
    s.record_intents([Intent(TERM, signal.SIGTERM, "trainer")])
    ended = ExitRecord(TERM, "exited", 20.5, 0, None)
    s.record_exits([ended])
    assert store(tmp_path).state.exits == (ended,)
    begin(s, event_id="ev-2", started_at=500.0)  # a new drain starts afresh: its processes' ends too
    assert store(tmp_path).state.exits == ()


def test_intent_is_recorded_once_per_event(tmp_path: Path) -> None:
    s = store(tmp_path)
    begin(s)
    first = s.record_intent(TERM, signal.SIGTERM, name="a")
    assert s.record_intent(TERM, signal.SIGTERM, name="a") == first
    assert len(s.state.signals) == 1
    begin(s, event_id="ev-2", started_at=500.0)  # a new drain starts afresh
    assert not s.already_signalled(TERM, signal.SIGTERM)


def test_a_new_drains_first_wave_is_written_with_its_state_in_one_write(tmp_path: Path) -> None:
    s = store(tmp_path)
    begin(s)
    s.record_intent(OTHER, signal.SIGTERM, name="old")  # the previous drain's: a new drain starts afresh
    writes: list[object] = []
    real = s._write
    s._write = lambda state, written=None, durable=True: (writes.append(state), real(state, written, durable))  # type: ignore[method-assign]
    event = Event("ev-2", "maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE", 500.0, deadline=800.0)
    s.save_lifecycle([event], ActiveDrain(["ev-2"], 500.0, 800.0), None, on_timeout="kill",
                     intents=[Intent(TERM, "SIGTERM", "trainer")])  # fmt: skip
    s.record_intents([Intent(TERM, signal.SIGTERM, "trainer")])  # the drain's own write-ahead: nothing new
    assert len(writes) == 1
    (intent,) = store(tmp_path).state.signals
    assert (intent.identity, intent.signal, intent.name, intent.sent_at) == (TERM, "SIGTERM", "trainer", None)


def test_a_first_wave_may_be_signalled_once_in_place_before_its_fsyncs_without_waiting_for_the_lock(
    tmp_path: Path,
) -> None:
    s = store(tmp_path)
    on_file: list[SignalRecord] = []
    returned = threading.Event()

    def written() -> None:  # called with the write's lock held, its fsyncs still to come
        on_file.extend(store(tmp_path).state.signals)  # what a daemon started now would read
        # The drain thread's own write-ahead for this wave: nothing new, so no wait for that lock.
        intents = [Intent(TERM, signal.SIGTERM, "trainer")]
        threading.Thread(target=lambda: (s.record_intents(intents), returned.set()), daemon=True).start()
        assert returned.wait(10), "record_intents waited for the lock of a write it had nothing to add to"

    event = Event("ev-2", "maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE", 500.0, deadline=800.0)
    s.save_lifecycle([event], ActiveDrain(["ev-2"], 500.0, 800.0), None, on_timeout="kill",
                     intents=[Intent(TERM, "SIGTERM", "trainer")], written=written)  # fmt: skip
    assert [(r.identity, r.signal, r.sent_at) for r in on_file] == [(TERM, "SIGTERM", None)]
    assert store(tmp_path).state == s.state


def test_a_failed_write_still_lets_the_drain_go_on_once(tmp_path: Path) -> None:
    target = tmp_path / "state"
    s = store(target)
    os.rmdir(target)  # the directory vanishes under the daemon
    calls: list[None] = []
    s.save_lifecycle([], None, None, on_timeout="kill", written=lambda: calls.append(None))
    assert calls == [None]
    assert s.write_error is not None


def test_clearing_every_event_leaves_an_empty_state(tmp_path: Path) -> None:
    s = store(tmp_path)
    begin(s, "preempted", "TRUE")
    s.record_intent(TERM, signal.SIGTERM)
    s.save_lifecycle([], None, None, on_timeout="kill")
    assert store(tmp_path).state == SavedState(BOOT)


def test_sent_without_intent_is_recorded_and_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    s = store(tmp_path)
    with caplog.at_level(logging.WARNING):
        record = s.record_sent(TERM, signal.SIGKILL, "gone")
    assert (record.signal, record.result) == ("SIGKILL", "gone")
    assert "no intent recorded" in caplog.text


def test_writes_are_atomic_and_leave_no_temp_files(tmp_path: Path) -> None:
    s = store(tmp_path)
    begin(s)
    for pid in range(100, 130):
        s.record_intent(ProcessIdentity(pid, 1), signal.SIGTERM)
        s.record_sent(ProcessIdentity(pid, 1), signal.SIGTERM, "sent")
    assert os.listdir(tmp_path) == [STATE_FILE]
    on_disk = json.loads((tmp_path / STATE_FILE).read_text())
    assert (on_disk["format"], on_disk["version"], on_disk["boot_id"]) == ("tpu-watchdog-state", 1, BOOT)
    assert len(on_disk["signals"]) == 30
    assert stat.S_IMODE(os.stat(tmp_path / STATE_FILE).st_mode) == 0o600


def test_missing_dir_is_created_private(tmp_path: Path) -> None:
    target = tmp_path / "var" / "lib" / "tpu-watchdog"
    store(target)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o700


def test_an_unusable_dir_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    with pytest.raises(StateDirError) as raised:
        store(blocker / "state")
    assert str(blocker / "state") in str(raised.value)
    assert f"{blocker} is a file, not a directory" in str(raised.value)
    assert "--state-dir" in str(raised.value)
    assert "permissions" not in str(raised.value)  # a file in the way is not a permission problem
    with pytest.raises(StateDirError, match=f"state dir {blocker} is a file, not a directory: remove it"):
        store(blocker)


def test_a_failed_write_is_noted_and_the_state_lives_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    target = tmp_path / "state"
    s = store(target)
    os.rmdir(target)  # the directory vanishes under the daemon
    with caplog.at_level(logging.DEBUG):  # the daemon's reporter says it loudly, once (write_error)
        begin(s, "preempted", "TRUE")
        s.record_intent(TERM, signal.SIGTERM)
    assert s.already_signalled(TERM, signal.SIGTERM)
    assert s.write_error is not None
    assert "cannot write" in caplog.text
    os.mkdir(target)
    s.record_sent(TERM, signal.SIGTERM, "sent")
    assert s.write_error is None
    assert store(target).state == s.state


VALID = {"format": "tpu-watchdog-state", "version": 1, "written_at": 1.0, "boot_id": BOOT,
         "event": {"source": "preempted", "value": "TRUE", "id": "e", "first_seen": 1.0}, "drain": None,
         "signals": []}  # fmt: skip

BAD_FILES = {
    "garbage": b"\x00\xff not json at all",
    "truncated": json.dumps(VALID).encode()[:40],
    "empty": b"",
    "foreign": json.dumps({"format": "someone-elses", "version": 1}).encode(),
    "a list": b"[1, 2, 3]",
    "future version": json.dumps({**VALID, "version": 2}).encode(),
    "wrong shape": json.dumps({**VALID, "signals": [{"pid": "x"}]}).encode(),
    "bad signal": json.dumps(
        {
            **VALID,
            "signals": [
                {
                    "pid": 5,
                    "start_time": 1,
                    "name": "",
                    "signal": "SIGFOO",
                    "intent_at": 1.0,
                    "sent_at": None,
                    "result": None,
                }
            ],
        }
    ).encode(),
    "deeply nested": b"[" * 100_000,
}


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_a_bad_file_is_moved_aside_and_a_clean_state_returned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    (tmp_path / STATE_FILE).write_bytes(BAD_FILES[kind])
    with caplog.at_level(logging.WARNING):
        s = store(tmp_path)
    assert s.state == SavedState(BOOT)
    (aside,) = [name for name in os.listdir(tmp_path) if name != STATE_FILE]
    assert aside.startswith(f"{STATE_FILE}.corrupt-")
    assert (tmp_path / aside).read_bytes() == BAD_FILES[kind]
    assert "moved to" in caplog.text
    begin(s, "preempted", "TRUE")  # and the store works on
    assert store(tmp_path).state.events


def test_a_file_from_a_previous_boot_is_stale(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    old = store(tmp_path, boot_id="previous-boot")
    begin(old)
    old.record_intent(TERM, signal.SIGTERM)
    with caplog.at_level(logging.WARNING):
        fresh = store(tmp_path)
    assert fresh.state == SavedState(BOOT)
    assert not fresh.already_signalled(TERM, signal.SIGTERM)
    (aside,) = [name for name in os.listdir(tmp_path) if name != STATE_FILE]
    assert aside.startswith(f"{STATE_FILE}.stale-")
    assert "previous-boot" in caplog.text


def test_an_empty_state_from_a_previous_boot_is_simply_replaced(tmp_path: Path) -> None:
    store(tmp_path, boot_id="previous-boot").save_lifecycle([], None, None, on_timeout="kill")
    assert store(tmp_path).state == SavedState(BOOT)
    assert os.listdir(tmp_path) == [STATE_FILE]


def test_only_the_newest_set_aside_files_are_kept(tmp_path: Path) -> None:
    for _ in range(8):
        (tmp_path / STATE_FILE).write_bytes(b"junk")
        store(tmp_path)
    assert len([n for n in os.listdir(tmp_path) if ".corrupt-" in n]) == 5


def test_boot_id_of_this_machine_and_an_unreadable_one(tmp_path: Path) -> None:
    assert len(read_boot_id()) == 36
    assert read_boot_id(str(tmp_path / "missing")) == ""


# -- a hostile or broken state directory ----------------------------------------------------------------


def test_a_planted_symlink_is_never_followed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    secret = tmp_path / "secret"
    secret.write_text('{"not": "ours"}')
    target = tmp_path / "state"
    target.mkdir(mode=0o700)
    os.symlink(secret, target / STATE_FILE)
    with caplog.at_level(logging.WARNING):
        s = store(target)
    assert s.state.empty
    assert "a symlink, never followed" in caplog.text
    assert not (target / STATE_FILE).exists()  # the link was moved aside (as a link), not its target
    [aside] = list(target.glob(f"{STATE_FILE}.corrupt-*"))
    assert aside.is_symlink()
    begin(s)
    assert secret.read_text() == '{"not": "ours"}'  # the write replaced no file through the link
    assert not (target / STATE_FILE).is_symlink()


def test_a_planted_fifo_does_not_block_the_start(tmp_path: Path) -> None:
    target = tmp_path / "state"
    target.mkdir(mode=0o700)
    os.mkfifo(target / STATE_FILE)  # opening it for reading would wait for a writer forever
    s = store(target)
    assert s.state.empty
    begin(s)
    assert stat.S_ISREG(os.lstat(target / STATE_FILE).st_mode)


def test_a_group_or_world_writable_dir_is_made_private(tmp_path: Path) -> None:
    target = tmp_path / "state"
    target.mkdir()
    os.chmod(target, 0o777)  # noqa: S103 - the planted mistake under test
    s = store(target)
    begin(s)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(target / STATE_FILE).st_mode) == 0o600


def test_a_dir_owned_by_someone_else_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "state"
    target.mkdir(mode=0o700)
    os.chown(target, os.geteuid() + 1000, -1)
    with pytest.raises(StateDirError) as raised:
        store(target)
    assert "owned by uid" in str(raised.value)
    assert "chown" in str(raised.value)


def test_a_read_only_dir_at_start_runs_from_memory(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Refusing to start would leave the host unprotected: the store runs in memory and says so."""
    target = tmp_path / "state"
    target.mkdir(mode=0o700)
    os.chmod(target, 0o500)
    if os.access(target, os.W_OK) and os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(target)], check=False)  # root ignores modes; immutable does not
    try:
        with caplog.at_level(logging.ERROR):
            s = store(target)
        if s.write_error is None:
            pytest.skip("cannot make a read-only directory here (root without chattr)")
        assert "STATE IS NOT PERSISTED" in caplog.text
        begin(s)
        assert s.state.drain is not None  # the in-memory state is the truth
        assert s.write_error is not None
    finally:
        subprocess.run(["chattr", "-i", str(target)], check=False, capture_output=True)


def test_temporary_files_of_an_interrupted_write_are_removed_at_start(tmp_path: Path) -> None:
    """What a kill -9 between mkstemp and rename leaves behind (the real crash is in test_crash_restart)."""
    s = store(tmp_path)
    begin(s)
    (tmp_path / f".{STATE_FILE}.k2j3h4.tmp").write_text('{"half": ')
    (tmp_path / ".probe-x1y2").write_text("")
    kept = tmp_path / "notes.txt"
    kept.write_text("not ours to remove")
    again = store(tmp_path)
    assert again.state == s.state
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", STATE_FILE]
