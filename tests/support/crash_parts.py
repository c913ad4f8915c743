"""What the crash scenario's driver (tests/support/crash_driver.py) runs and watches: a holder process, one
daemon run, the state file; each times what it sees where it happens."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tests.support.crash_scenario import HOLDER, HolderPlan


class Holder:
    """One holder process, a child of the driver: every line it says, timed; its death, timed by waitpid."""

    def __init__(self, plan: HolderPlan, device: Path) -> None:
        read_end, write_end = os.pipe()
        self.plan = plan
        self.popen = subprocess.Popen(
            [sys.executable, "-c", HOLDER, plan.mode, str(device), str(write_end), str(plan.delay)],
            pass_fds=(write_end,),
            stdin=subprocess.DEVNULL,
        )
        os.close(write_end)
        self.lines: list[tuple[float, str]] = []
        self.died: float | None = None
        self.killed_by_driver = False
        self._read_end = read_end
        self._threads = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._reap, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _read(self) -> None:
        buffer = b""
        while chunk := os.read(self._read_end, 4096):
            now = time.time()
            buffer += chunk
            while b"\n" in buffer:
                line, _, buffer = buffer.partition(b"\n")
                self.lines.append((now, line.decode()))
        os.close(self._read_end)

    def _reap(self) -> None:
        self.popen.wait()
        self.died = time.time()

    def said(self, word: str) -> list[float]:
        return [t for t, line in list(self.lines) if line.split(" ")[0] == word]

    @property
    def gone(self) -> bool:
        return self.died is not None or bool(self.said("released"))

    def close(self) -> None:
        if self.died is None:
            self.killed_by_driver = True
            self.popen.kill()
        for thread in self._threads:
            thread.join(timeout=10)

    def facts(self, alive_at_end: bool) -> dict[str, Any]:
        released = self.said("released")
        return {
            "pid": self.popen.pid,
            "mode": self.plan.mode,
            "delay": self.plan.delay,
            "terms": self.said("term"),
            "released": released[0] if released else None,
            "died": None if self.killed_by_driver else self.died,
            "returncode": self.popen.returncode,
            "killed_by_driver": self.killed_by_driver,
            "alive_at_end": alive_at_end,
        }


class DaemonRun:
    """One `tpu-watchdog run`, its stderr read line by line (timed) into a log file."""

    def __init__(self, index: int, argv: list[str], log_path: Path) -> None:
        self.index = index
        self.log_path = log_path
        self.launched = time.time()
        self.started: float | None = None  # when it said "tpu-watchdog started" (its drain resumed by then)
        self.killed: float | None = None
        self.errors: list[str] = []
        self.popen = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stderr is not None
        with open(self.log_path, "w", encoding="utf-8") as log:
            for raw in self.popen.stderr:
                line = raw.decode(errors="replace")
                log.write(f"{time.time():.3f} {line}")
                log.flush()
                if self.started is None and "tpu-watchdog started" in line:
                    self.started = time.time()
                if "Traceback" in line or "internal error" in line:
                    self.errors.append(line.strip())

    def kill(self) -> None:
        """kill -9: no handler runs, nothing is saved, the state file is whatever the last write left."""
        self.killed = time.time()
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=10)
        self._reader.join(timeout=10)

    def stop(self) -> int:
        self.popen.send_signal(signal.SIGTERM)
        status = self.popen.wait(timeout=20)
        self._reader.join(timeout=10)
        return status

    def facts(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "launched": self.launched,
            "started": self.started,
            "killed": self.killed,
            "returncode": self.popen.returncode,
            "errors": self.errors,
            "log": self.log_path.read_text(encoding="utf-8") if self.log_path.exists() else "",
        }


class StateWatch:
    """Reads state.json every 20 ms; keeps each distinct content (written_at aside), with when it was seen."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.states: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._last: Any = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def read(self) -> dict[str, Any] | None:
        """The state file now, in the shape the checks use (None: no file yet)."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        drain = data["drain"]
        state = {
            "events": [
                {"id": e["id"], "deadline": e["deadline"], "drained": e["drained"]} for e in data["events"]
            ],
            "drain": {
                "started_at": drain["started_at"],
                "deadline_at": drain["deadline_at"],
                "late": drain.get("late", False),
            }
            if drain
            else None,
            "last_outcome": data["last_outcome"],
            "signals": [
                {"pid": s["pid"], "signal": s["signal"], "confirmed": s["sent_at"] is not None}
                for s in data["signals"]
            ],
        }
        if state != self._last:
            self._last = state
            self.states.append({**state, "seen": time.time()})
        return state

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            try:
                self.read()
            except (ValueError, KeyError, TypeError) as error:  # never from an atomic write: a violation
                self.errors.append(f"state.json unreadable: {type(error).__name__}: {error}")

    def latest(self) -> dict[str, Any] | None:
        self.read()
        return self.states[-1] if self.states else None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
