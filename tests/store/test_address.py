"""store/address.py: the running daemon's listen address in its state dir."""

from __future__ import annotations

from pathlib import Path

from watchdog.store.address import read_listen_address, remove_listen_address, write_listen_address


def test_a_write_a_crash_interrupted_leaves_nothing_once_the_next_daemon_writes_or_stops(
    tmp_path: Path,
) -> None:
    """A kill -9 between the temporary file and its rename left `listen.PID.tmp` for good (a crash scenario
    found it in the state dir after the event)."""
    (tmp_path / "listen.55.tmp").write_text("127.0.0.1:9")
    write_listen_address(str(tmp_path), "127.0.0.1:9101")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["listen"]
    assert read_listen_address(str(tmp_path)) == "127.0.0.1:9101"
    (tmp_path / "listen.56.tmp").write_text("127.0.0.1:9")
    remove_listen_address(str(tmp_path))
    assert list(tmp_path.iterdir()) == []
