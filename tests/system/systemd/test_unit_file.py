"""The unit file as systemd's own tools judge it, no running systemd needed: `systemd-analyze verify`
prints nothing (it only warns, rc 0, about unknown keys and bad values, so any output fails), and
`systemd-analyze security --offline=yes` scores its exposure at 3.0 or less."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.units import SHIPPED_EXEC_START, UNIT, VENV_BINARY, unit_text

MAX_EXPOSURE = 3.0

pytestmark = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed (apt-get install systemd)"
)


@pytest.fixture
def unit_copy(tmp_path: Path) -> Path:
    """The unit under its real name, with ExecStart pointing at a binary that exists here."""
    assert VENV_BINARY.exists(), f"{VENV_BINARY} missing: run `make setup`"
    path = tmp_path / UNIT.name
    path.write_text(unit_text())
    return path


def analyze(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemd-analyze", *args], capture_output=True, text=True, timeout=60, check=False)


def test_verify_prints_nothing(unit_copy: Path) -> None:
    # --man=no: Documentation=man:tpu-watchdog(1) is checked by running man(1), and only the .deb installs
    # the page (tests/system/packaging/test_deb.py verifies the installed unit with it).
    result = analyze("verify", "--man=no", str(unit_copy))
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_verify_notices_a_bad_directive(unit_copy: Path) -> None:
    """The check above can fail: a misspelt directive is reported (on stderr, with rc 0)."""
    unit_copy.write_text(unit_copy.read_text().replace("ProtectClock=", "ProtectClocks="))
    result = analyze("verify", "--man=no", str(unit_copy))
    assert "ProtectClocks" in result.stderr


def test_the_copy_changes_only_exec_start(unit_copy: Path) -> None:
    shipped = UNIT.read_text().splitlines()
    copied = unit_copy.read_text().splitlines()
    changed = [(a, b) for a, b in zip(shipped, copied, strict=False) if a != b]
    assert len(shipped) == len(copied)
    assert changed == [(SHIPPED_EXEC_START, f"ExecStart={VENV_BINARY} run")]


def exposure(unit: Path) -> tuple[float, list[dict[str, object]]]:
    """The overall exposure (0 safest, 10 worst) and the per-setting rows of `--json=short`."""
    result = analyze("security", "--offline=yes", "--no-pager", "--json=short", str(unit))
    assert result.returncode == 0, result.stderr
    rows: list[dict[str, object]] = json.loads(result.stdout)
    text = analyze("security", "--offline=yes", "--no-pager", str(unit)).stdout
    overall = [line for line in text.splitlines() if "Overall exposure level" in line]
    assert len(overall) == 1, text
    # "→ Overall exposure level for tpu-watchdog.service: 2.9 OK 🙂"
    return float(overall[0].split(":", 1)[1].split()[0]), rows


def test_exposure_is_at_most_three(unit_copy: Path) -> None:
    score, rows = exposure(unit_copy)
    open_rows = sorted((str(row.get("name")), row.get("exposure")) for row in rows if row.get("set") is False)
    assert score <= MAX_EXPOSURE, f"exposure {score} > {MAX_EXPOSURE}; settings left open: {open_rows}"


def test_the_settings_the_daemon_needs_are_the_ones_left_open(unit_copy: Path) -> None:
    """What stays open is on purpose (docs/hardening.md): root, signals, ptrace-read of /proc, the
    host's /dev, /proc and /tmp, the network. Anything else open is a regression in the hardening."""
    _, rows = exposure(unit_copy)
    open_names = {str(row["name"]) for row in rows if row.get("set") is False}
    expected = {
        "RootDirectory=/RootImage=",
        "User=/DynamicUser=",
        "PrivateDevices=",
        "CapabilityBoundingSet=~CAP_KILL",
        "CapabilityBoundingSet=~CAP_(DAC_*|FOWNER|IPC_OWNER)",
        "CapabilityBoundingSet=~CAP_SYS_PTRACE",
        "RestrictAddressFamilies=~AF_UNIX",
        "RestrictAddressFamilies=~AF_(INET|INET6)",
        "ProtectProc=",
        "ProcSubset=",
        "PrivateNetwork=",
        "PrivateUsers=",
        "PrivateTmp=",
        "DeviceAllow=",
        "IPAddressDeny=",
    }
    assert open_names == expected
