"""What every configuration test needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog.config import settings


@pytest.fixture(autouse=True)
def no_default_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine's own /etc file must not leak into the tests."""
    monkeypatch.setattr(settings, "DEFAULT_CONFIG_PATH", str(tmp_path / "absent" / "config.toml"))
