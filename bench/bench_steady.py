"""Months of uptime in an hour: is the daemon's RSS, thread count and fd count flat under steady faults?

A real `tpu-watchdog run` against a `tpu-watchdog fake-metadata`, both subprocesses. Every FAULT_EVERY s: the
upcoming-maintenance notice changes (its window start, weeks ahead: nothing to drain for), so that watch's
hanging GET is answered and asked again every time; and, unless the last one still waits for a request to
take it, a fault for the preempted watch's next request (503, a reset, a 2 s delay, a trickling body, in
turn), so that watch fails and retries. Every DRAIN_EVERY s a holder opens the device,
TERMINATE_ON_HOST_MAINTENANCE is set (its watch is left alone, so each drain happens), the holder's SIGTERM is
awaited, the event is cleared and the daemon is back to idle. Every SAMPLE_EVERY s: VmRSS, threads and open
fds of the daemon. Goal, from minute 5 to the end: RSS within 1 MiB, and no growth of threads or fds (the
second half's highest count no higher than the first half's: an fd or a thread open for a moment, a
reconnecting watch's socket or the benchmark's own /status request, is no leak; one left per drain or per
fault grows).
STEADY_MINUTES (default 11) sets the length; the one-hour run is `STEADY_MINUTES=60`. The device node has
a number nothing else holds, so the daemon can only ever signal the benchmark's own holder.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.bench_idle import _free_port, _get, _stop, _wait, start_fake, status_kb

DOC = Path(__file__).resolve().parent.parent / "docs" / "reliability.md"
REPO = Path(__file__).resolve().parent.parent
FAULT_EVERY = 2.0
DRAIN_EVERY = 60.0
SAMPLE_EVERY = 10.0
FROM_MINUTE = 5.0
GOAL_MIB = 1.0
RDEV = (4000, 161)  # a character device number nothing holds (far above any registered driver)
WINDOWS = ("2031-01-06T00:00:00Z", "2031-01-07T00:00:00Z")  # the notice's window start, in turn
FAULTS = (
    {"kind": "status", "status": 503},
    {"kind": "reset"},
    {"kind": "delay", "seconds": 2.0},
    {"kind": "trickle", "seconds": 15.0},  # the body deadline is scheduled, then cancelled or fired
)
HOLDER = r"""
import os, signal, sys
fd = os.open(sys.argv[1], os.O_PATH)  # no driver behind the number: O_PATH holds the node itself
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
sys.stdout.write("ready\n"); sys.stdout.flush()
while True:
    signal.pause()
"""


def _send(url: str, data: bytes, method: str) -> None:
    request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 - loopback, our own fake
    with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310
        answer.read()


def sample(pid: int) -> tuple[int, int, int]:
    """(VmRSS KiB, threads, open fds) of the daemon now."""
    return status_kb(pid, "VmRSS"), len(os.listdir(f"/proc/{pid}/task")), len(os.listdir(f"/proc/{pid}/fd"))


def drain_once(fake: str, listen: str, device: Path) -> None:
    """A holder, an event, its SIGTERM, the clear, back to idle."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(device)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == b"ready"
        key = f"http://{fake}/_fake/v1/instance/maintenance-event"
        _send(key, b"TERMINATE_ON_HOST_MAINTENANCE", "PUT")
        holder.wait(timeout=60)  # its SIGTERM handler exits
        _send(key, b"NONE", "PUT")
        _wait(lambda: b'"state": "idle"' in _get(f"http://{listen}/status"), 60, "idle after the clear")
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


def steady(minutes: float) -> dict[str, object]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory(prefix="bench-steady-") as tmp:
        work = Path(tmp)
        (work / "empty.toml").write_text("")
        device = work / "accel0"
        os.mknod(device, 0o600 | stat.S_IFCHR, os.makedev(*RDEV))
        fake, fake_proc, logs = start_fake(work, env)
        listen = f"127.0.0.1:{_free_port()}"
        daemon = None
        samples: list[tuple[float, int, int, int]] = []
        drains = faults = changes = 0
        try:
            daemon = subprocess.Popen(
                [sys.executable, "-m", "watchdog", "run", "--config", str(work / "empty.toml"),
                 "--metadata-host", fake, "--device", str(device), "--state-dir", str(work / "state"),
                 "--listen", listen, "--log-level", "info"],
                stdout=logs[1], stderr=subprocess.STDOUT, cwd=REPO, env=env,
            )  # fmt: skip
            _wait(lambda: b'"state": "idle"' in _get(f"http://{listen}/status"), 30, "the daemon's /status")
            began = time.monotonic()
            end = began + minutes * 60
            next_fault = next_drain = next_sample = began
            while (now := time.monotonic()) < end:
                if now >= next_sample:
                    samples.append(((now - began) / 60, *sample(daemon.pid)))
                    next_sample += SAMPLE_EVERY
                if now >= next_drain:
                    try:
                        drain_once(fake, listen, device)
                    except (AssertionError, OSError, subprocess.TimeoutExpired) as exc:
                        status = _get(f"http://{listen}/status").decode(errors="replace")
                        tail = (work / "daemon.log").read_text()[-3000:]
                        raise RuntimeError(
                            f"drain {drains + 1} failed: {exc}\n/status: {status}\n{tail}"
                        ) from exc
                    drains += 1
                    next_drain += DRAIN_EVERY
                if now >= next_fault:
                    notice = {"maintenance_status": "PENDING", "type": "SCHEDULED",
                              "window_start_time": WINDOWS[changes % 2]}  # fmt: skip
                    upcoming = f"http://{fake}/_fake/v1/instance/upcoming-maintenance"
                    _send(upcoming, json.dumps(notice).encode(), "PUT")
                    changes += 1
                    if not json.loads(_get(f"http://{fake}/_fake/faults")):  # the last one was used
                        fault = {**FAULTS[faults % len(FAULTS)], "path": "instance/preempted"}
                        _send(f"http://{fake}/_fake/faults", json.dumps(fault).encode(), "POST")
                        faults += 1
                    next_fault += FAULT_EVERY
                time.sleep(max(0.0, min(next_fault, next_drain, next_sample, end) - time.monotonic()))
            samples.append(((time.monotonic() - began) / 60, *sample(daemon.pid)))
            assert daemon.poll() is None, (work / "daemon.log").read_text()[-2000:]
        finally:
            if daemon is not None and daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
            _stop(daemon)
            _stop(fake_proc)
            for log in logs:
                log.close()
    return {"minutes": minutes, "samples": samples, "drains": drains, "faults": faults, "changes": changes}


def table(result: dict[str, object]) -> tuple[str, bool]:
    samples: list[tuple[float, int, int, int]] = result["samples"]  # type: ignore[assignment]
    late = [s for s in samples if s[0] >= FROM_MINUTE] or samples[-1:]
    first, last = late[0], late[-1]
    rss = [s[1] / 1024 for s in late]
    threads, fds = [s[2] for s in late], [s[3] for s in late]
    rss_ok = max(rss) - min(rss) <= GOAL_MIB
    half = len(late) // 2
    grows = [max(counts[half:]) > max(counts[: half or 1]) for counts in (threads, fds)]
    flat = rss_ok and not any(grows)
    rss0, top = samples[0][1] / 1024, max(s[1] for s in samples) / 1024
    rows = [
        ("run", f"{result['minutes']:.0f} min, {result['drains']} drains, {result['faults']} faults, "
         f"{result['changes']} notice changes"),
        ("RSS at minute 0 / max overall, MiB", f"{rss0:.2f} / {top:.2f}"),
        (f"RSS minute {first[0]:.1f} -> {last[0]:.1f}, MiB", f"{rss[0]:.2f} -> {rss[-1]:.2f} "
         f"(min {min(rss):.2f}, max {max(rss):.2f}, spread {max(rss) - min(rss):.2f})"),
        (f"threads minute {first[0]:.1f} -> {last[0]:.1f}", f"{threads[0]} -> {threads[-1]} "
         f"(min {min(threads)}, max {max(threads)})"),
        (f"open fds minute {first[0]:.1f} -> {last[0]:.1f}", f"{fds[0]} -> {fds[-1]} "
         f"(min {min(fds)}, max {max(fds)})"),
        (f"goal: RSS within {GOAL_MIB:.0f} MiB, threads and fds no higher in the second half than the first",
         "met" if flat else "**NOT met**"),
    ]  # fmt: skip
    every = max(1, len(samples) // 12)
    curve = ", ".join(f"{s[0]:.1f}: {s[1] / 1024:.2f}" for s in samples[::every])
    text = "| | |\n| --- | --- |\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)
    return f"{text}\n\nRSS (MiB) by minute: {curve}.\n", flat


def run() -> str:
    from bench.__main__ import replace_section  # the same section markers as docs/benchmarks.md

    minutes = float(os.environ.get("STEADY_MINUTES", "11"))
    load = os.getloadavg()
    result = steady(minutes)
    body, flat = table(result)
    section = (
        f"### Steadiness, {minutes:.0f} minutes\n\n`STEADY_MINUTES={minutes:.0f} .venv/bin/python -m bench "
        f"steady`: every {FAULT_EVERY:.0f} s a changed upcoming-maintenance notice and (once the last was "
        "taken) a fault for the preempted watch (503, reset, delay, trickle in turn); a drain every "
        f"{DRAIN_EVERY:.0f} s; load average at the start {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}.\n\n"
        f"{body}"
    )
    if DOC.exists():
        DOC.write_text(replace_section(DOC.read_text(), f"steady{minutes:.0f}", section))
    return (
        f"## Steadiness\n\n{minutes:.0f} minutes of steady faults and a drain every minute: RSS, threads and "
        f"fds {'flat' if flat else 'NOT flat'} from minute {FROM_MINUTE:.0f}. The table is in "
        "docs/reliability.md.\n"
    )


if __name__ == "__main__":
    sys.stdout.write(run() + "\n")
