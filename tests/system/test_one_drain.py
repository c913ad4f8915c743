"""One event is one drain, and every surface tells it the same: a real `tpu-watchdog run` against the real
fake metadata server drains four real holders (three leave on SIGTERM, one ignores it and is SIGKILLed at
the deadline), is restarted mid-drain (a clean stop, or kill -9), and then a job restarted after the drain
ended (a late arrival) joins that same drain. The journal lines, `tpu-watchdog status`, `/status`,
`tpu-watchdog history` (text and --json), a real webhook receiver's payloads and `/metrics` must agree on
the drain's id, start, duration, process count and each process's end.

The daemon and its holders run in a private PID namespace (the driver is its PID 1), so the drain can signal
nothing the test did not start, and the daemon can be restarted inside it.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.support.pidns import needs_unshare, run_driver
from watchdog.core.clock import parse_utc_text
from watchdog.store.drain_text import ended_line

pytestmark = pytest.mark.slow

GRACE = 8.0

DRIVER = r"""
import json, os, signal, subprocess, sys, time, urllib.request
from pathlib import Path
from tests.support.ports import reserved_port
from tests.support.waiting import wait_for
from tests.support.webhook_receiver import WebhookReceiver
from tests.support.workloads import TEST_ALLOW, Child, make_device
from watchdog.fake.server import FakeMetadataServer

tmp, restart, grace = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
device = make_device(tmp)
config, state = tmp / "config.toml", tmp / "state"

def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
        return answer.read().decode()

def status(port):
    try:
        return json.loads(get(port, "/status"))
    except OSError:
        return {}

def command(*args):
    done = subprocess.run([sys.executable, "-m", "watchdog", *args, "--config", str(config),
                           "--state-dir", str(state)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout

def daemon(n):
    log = open(tmp / f"daemon-{n}.log", "w")
    return subprocess.Popen(
        [sys.executable, "-m", "watchdog", "run", "--config", str(config), "--device", str(device),
         "--allow-number", TEST_ALLOW, "--metadata-host", fake.address, "--state-dir", str(state),
         "--log-format", "json", "--metadata-timeout-sec", "2"], stderr=log)

report = {}
with FakeMetadataServer(listen="127.0.0.1:0") as fake, WebhookReceiver(statuses=[]) as receiver, \
        reserved_port() as port:
    config.write_text(f'listen = "127.0.0.1:{port}"\n[drain]\nmaintenance_grace = {grace}\n'
                      f'[notify]\nwebhooks = ["{receiver.url}"]\n')
    holders = {name: Child(mode, device) for name, mode in
               [("handled", "handled"), ("default", "default"), ("slow", "slow"), ("ignore", "ignore")]}
    for child in holders.values():
        child.wait_ready()
    first = daemon(1)
    wait_for(lambda: status(port).get("state") == "idle", timeout=30, what="the first daemon up")
    fake.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
    for name in ("handled", "default", "slow"):
        holders[name].popen.wait(timeout=20)
    gone = lambda: [p for p in status(port)["drain"]["processes"] if p["end"] == "exited"]
    wait_for(lambda: len(gone()) == 3, timeout=20, what="three holders gone, in the drain")
    report["before_restart"] = status(port)["drain"]
    if restart == "kill -9":
        first.kill()
    else:
        first.send_signal(signal.SIGTERM)
    report["first_exit"] = first.wait(timeout=20)
    second = daemon(2)
    wait_for(lambda: status(port).get("state") == "timed_out", timeout=40, what="the drain timed out")
    report["ignore_exit"] = holders["ignore"].popen.wait(timeout=5)
    report["first_end"] = status(port)
    report["metrics_first_end"] = get(port, "/metrics")
    late = Child("ignore", device)  # a supervisor restarted the job while the event is still on
    late.wait_ready()
    report["late_exit"] = late.popen.wait(timeout=20)
    def ended_again():
        shown = status(port)
        drains = shown.get("recent_drains") or [{}]
        return shown.get("drain") is None and len(drains[0].get("processes", ())) == 5 and shown
    report["status"] = wait_for(ended_again, timeout=20, what="the late arrival in the drain, ended")
    wait_for(lambda: len([b for b in receiver.delivered() if b["type"] == "drain_finished"]) == 2,
             timeout=20, what="both drain_finished notices")
    report["metrics"] = get(port, "/metrics")
    report["status_text"] = command("status")
    report["history_text"] = command("history")
    report["history_json"] = json.loads(command("history", "--json"))
    second.send_signal(signal.SIGTERM)
    report["second_exit"] = second.wait(timeout=20)
    report["webhooks"] = receiver.delivered()
report["pids"] = {name: child.popen.pid for name, child in holders.items()}
report["pids"]["late"] = late.popen.pid
report["logs"] = [(tmp / f"daemon-{n}.log").read_text() for n in (1, 2)]
print(json.dumps(report))
"""


def seconds(text: str) -> float:
    return parse_utc_text(text)


ENDS = re.compile(r"\b(exited|killed|released|still running)\b")
AFTER = re.compile(r"\bafter (\d+\.\d+) s\b")
COUNT = re.compile(r"\b(\d+) process(?:es|\(es\))?\b")


def metric(text: str, name: str, **labels: str) -> float:
    """One sample of a Prometheus text exposition (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = re.escape(name) + (r"\{" + re.escape(want) + r"\}" if want else "") + r" (\S+)"
    found = re.search(r"^" + pattern + r"$", text, re.M)
    return float(found.group(1)) if found else 0.0


def journal(logs: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for text in logs for line in text.splitlines() if line.startswith("{")]


def text_ends(lines: list[str]) -> dict[int, str]:
    """pid -> end, from the process lines of `status` or `history` text (`  4242 python3 ... exited ...`)."""
    found = {}
    for line in lines:
        head = re.match(r"^\s+(\d+) ", line)
        end = ENDS.search(line)
        if head and end:
            found[int(head.group(1))] = end.group(1)
    return found


def after(text: str) -> float:
    found = AFTER.search(text)
    assert found, text
    return float(found.group(1))


def count(text: str) -> int:
    found = COUNT.search(text)
    assert found, text
    return int(found.group(1))


@needs_unshare
@pytest.mark.parametrize("restart", ["graceful", "kill -9"])
def test_a_drain_restarted_midway_and_joined_late_is_one_drain_on_every_surface(
    tmp_path: Path, restart: str
) -> None:
    driver = DRIVER.replace("sys.argv[2]", repr(restart)).replace("sys.argv[3]", repr(str(GRACE)))
    report = run_driver(driver, tmp_path, timeout=150)
    pids = report["pids"]
    ends = {pids[n]: "exited" for n in ("handled", "default", "slow")}
    ends[pids["ignore"]] = "killed"  # ignores SIGTERM: SIGKILLed at the deadline (by the restarted daemon)
    ends[pids["late"]] = "killed"  # after the deadline, a late arrival gets SIGTERM and SIGKILL at once
    assert (report["ignore_exit"], report["late_exit"]) == (-signal.SIGKILL, -signal.SIGKILL)

    # The history: one drain, its entry rewritten with the late arrival in it.
    (entry,) = report["history_json"]
    drain_id, started, duration = entry["id"], entry["started"], entry["duration"]
    assert (entry["outcome"], entry["late"]) == ("timed_out", True)
    assert {p["pid"]: p["end"] for p in entry["processes"]} == ends
    assert [p["pid"] for p in entry["processes"] if p["late_arrival"]] == [pids["late"]]
    assert duration == pytest.approx(seconds(entry["ended"]) - seconds(started), abs=0.002)

    # /status: the same entry in recent_drains and in last_drain (the drain that ended last), same types.
    shown = report["status"]
    assert shown["last_drain"] == shown["recent_drains"][0] == entry
    at_first_end = report["first_end"]  # the restarted daemon's, before the late arrival: its first end
    assert at_first_end["last_drain"] == at_first_end["recent_drains"][0]
    assert (at_first_end["last_drain"]["id"], at_first_end["last_drain"]["late"]) == (drain_id, False)
    assert len(at_first_end["last_drain"]["processes"]) == 4
    assert "record" not in (report["before_restart"] or {})  # one list of the running drain's processes
    assert len(report["before_restart"]["processes"]) == 4

    # `tpu-watchdog status` and `history`, in words.
    for name in ("status_text", "history_text"):
        text = report[name]
        head = next(line for line in text.splitlines() if line.startswith(("last drain:", "●")))
        if name == "status_text":
            assert head.startswith("last drain:  timed_out (reopened for a late arrival), started " + started)
        else:
            assert head.startswith(f"● drain {drain_id}: timed_out")
            assert f"Started: {started}" in text
        tail = text.split("Ended:", 1)[-1]
        assert after(head if name == "status_text" else tail) == pytest.approx(duration, abs=0.006), name
        assert count(head if name == "status_text" else tail.split("Processes:", 1)[1]) == 5, name
        assert text_ends(text.splitlines()) == ends, name

    # The webhooks: drain_started, resumed, reopened and two drain_finished, all of the one drain.
    hooks = [b for b in report["webhooks"] if b["type"].startswith("drain_")]
    assert [b["type"] for b in hooks] == ["drain_started"] * 2 + ["drain_finished", "drain_started",
                                                                  "drain_finished"]  # fmt: skip
    assert {b["drain_id"] for b in hooks} == {drain_id}
    first_end, final = hooks[2], hooks[4]
    for end in (first_end, final):
        assert (end["started"], end["outcome"]) == (started, "timed_out")
    assert final["duration"] == pytest.approx(duration, abs=0.002)
    assert {p["pid"]: p["end"] for p in final["processes"]} == ends
    assert len(first_end["processes"]) == 4

    # The journal: both daemons' lines, every drain line of the one drain.
    lines = journal(report["logs"])
    drain_lines = [line for line in lines if line.get("kind") in ("drain_started", "drain_finished")]
    assert {line["drain_id"] for line in drain_lines} == {drain_id}
    finished = [line for line in drain_lines if line["kind"] == "drain_finished"]
    assert [line["late"] for line in finished] == [False, True]
    assert finished[1]["message"] == ended_line(entry)  # the history entry's own sentence
    assert after(finished[1]["message"]) == pytest.approx(duration, abs=0.006)
    assert count(finished[1]["message"]) == 5
    assert after(finished[0]["message"]) == pytest.approx(first_end["duration"], abs=0.006)
    rejoined = [line["message"] for line in drain_lines if line["kind"] == "drain_started"][1:]
    assert all(f"(started {started})" in message for message in rejoined), rejoined
    per_process = {}
    for line in lines:  # the lines under the last drain_finished: one per process
        if line.get("kind") is None and line.get("drain_id") == drain_id and "pid" in line:
            end = ENDS.search(line["message"])
            per_process[line["pid"]] = end.group(1) if end else line["message"]
    assert per_process == ends

    # Each SIGTERM at one offset from the drain's start on every surface that times it (/status's is the
    # entry's), the ones the first daemon sent included (the resumed record once had them "before
    # restart", untimed).
    term = {p["pid"]: p["sent_after"]["SIGTERM"] for p in entry["processes"]}
    assert None not in term.values(), term
    said = {}
    for line in lines:
        if line.get("kind") is None and line.get("drain_id") == drain_id and "pid" in line:
            sent = re.search(r"SIGTERM \+([0-9.]+) s", line["message"])
            said[line["pid"]] = float(sent.group(1)) if sent else line["message"]
    assert said == pytest.approx(term, abs=0.006)

    # The metrics: counted once, at its first end (the reopened end adds nothing).
    metrics = report["metrics"]
    assert metric(metrics, "tpu_watchdog_drains_total", outcome="timed_out") == 1
    assert sum(metric(metrics, "tpu_watchdog_drains_total", outcome=o) for o in ("exited", "no_holders",
               "cancelled")) == 0  # fmt: skip
    assert metric(metrics, "tpu_watchdog_drain_duration_seconds_count") == 1
    first_duration = metric(metrics, "tpu_watchdog_drain_duration_seconds_sum")
    assert first_duration == pytest.approx(first_end["duration"], abs=0.002)
    assert report["metrics_first_end"].count("tpu_watchdog_drain_duration_seconds_count 1.0") == 1
