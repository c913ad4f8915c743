"""`tpu-watchdog config` as a user runs it: a subprocess, exit 0 with provenance, exit 78 on a bad config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from watchdog.exitcodes import EXIT_CONFIG


def run_config(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: val for k, val in os.environ.items() if not k.startswith("TPU_WATCHDOG_")}
    clean["TPU_WATCHDOG_CONFIG"] = os.devnull  # an empty file: this machine's /etc must not leak in
    return subprocess.run(
        [sys.executable, "-m", "watchdog", "config", *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
        env={**clean, **(env or {})},
    )


def test_prints_each_setting_with_its_source(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[drain]\nmaintenance_grace = 120\n[hooks]\non_event_start = ["/bin/echo", "hi"]\n')
    done = run_config(
        "--config", str(path), "--listen", "[::1]:0", env={"TPU_WATCHDOG_DRAIN_ON_TIMEOUT": "leave"}
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"# config file: {path}"
    by_key = {line.split(" = ")[0]: line for line in lines[1:]}
    assert by_key["drain.maintenance_grace"].endswith(f"# file {path}")
    assert "= 120 " in by_key["drain.maintenance_grace"]
    assert by_key["drain.on_timeout"].endswith("# env TPU_WATCHDOG_DRAIN_ON_TIMEOUT")
    assert '"leave"' in by_key["drain.on_timeout"]
    assert '"[::1]:0"' in by_key["listen"]
    assert by_key["listen"].endswith("# flag --listen")
    assert '["/bin/echo", "hi"]' in by_key["hooks.on_event_start"]
    assert by_key["drain.preemption_grace"].endswith("# default")


def test_json_output(tmp_path: Path) -> None:
    done = run_config("--json", "--grace", "60", "--exclude", "uid:0", "--state-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    settings = document["settings"]
    assert settings["drain.maintenance_grace"] == {
        "value": 60.0, "source": "flag", "where": "--grace", "env": "TPU_WATCHDOG_DRAIN_MAINTENANCE_GRACE",
        "flag": "--grace",
    }  # fmt: skip
    assert settings["exclude.uids"]["value"] == [0]
    assert settings["listen"]["value"] == "127.0.0.1:9478"
    assert settings["metadata.host"]["value"] is None


def test_a_bad_config_exits_78_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[drain]\non_timeout = 'wait'\n")
    done = run_config("--config", str(path))
    assert done.returncode == EXIT_CONFIG
    assert done.stdout == ""
    assert str(path) in done.stderr
    assert "drain.on_timeout" in done.stderr
    assert "kill | leave" in done.stderr


def test_a_bad_flag_or_variable_exits_78() -> None:
    assert run_config("--grace", "-3").returncode == EXIT_CONFIG
    done = run_config(env={"TPU_WATCHDOG_GRCE": "3"})
    assert done.returncode == EXIT_CONFIG
    assert "TPU_WATCHDOG_GRCE" in done.stderr


def test_says_what_run_would_warn_about_and_shows_the_url_redacted() -> None:
    done = run_config("--webhook", "https://hooks.example.com/services/T0/B0/s3cr3t")
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("tpu-watchdog: warning: notify.webhooks: a --webhook URL is visible")
    assert "https://hooks.example.com/…redacted" in done.stdout
    assert "s3cr3t" not in done.stdout + done.stderr
