"""The framework tests' venvs: which Python each framework needs, where its venv is, how it is built, and
why its tests are skipped where it cannot be. Stdlib only: the Makefile runs it with the system's python3.

MaxText needs Python >= 3.12 and Pax exactly 3.10 (lingvo 0.12.7 wants < 3.11), the project runs on >= 3.10:
each framework gets a venv of its own (`.venv-maxtext`, `.venv-pax`, or $MAXTEXT_VENV / $PAX_VENV) from a
pinned list (tests/requirements-NAME.txt: the whole environment, installed with --no-deps).

    python3 tests/support/frameworks.py python NAME    # the Python it would use, or exit 1 saying why not
    python3 tests/support/frameworks.py setup NAME     # build the venv (once; again when the list changes)

$NAME_PYTHON (MAXTEXT_PYTHON, PAX_PYTHON) names the Python to use instead of searching for one.

`setup` keeps the wheels it downloads in a wheel cache ($FRAMEWORK_WHEELS, default
~/.cache/tpu-watchdog/wheels/NAME): a later set-up (a fresh clone, CI with that directory cached) installs
from it without the network. pip's own cache is not relied on: on this machine it stored nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
INSTALLED = ".installed"  # written once every pinned package is in
SETUP_TIMEOUT = float(os.environ.get("FRAMEWORK_SETUP_TIMEOUT", "1800"))  # seconds per pip command


@dataclasses.dataclass(frozen=True)
class Framework:
    name: str
    minimum: tuple[int, int]
    below: tuple[int, int] | None  # the first Python version it no longer installs on

    @property
    def venv(self) -> Path:
        return REPO / os.environ.get(f"{self.name.upper()}_VENV", f".venv-{self.name}")

    @property
    def requirements(self) -> Path:
        return REPO / "tests" / f"requirements-{self.name}.txt"

    @property
    def wheels(self) -> Path:
        root = os.environ.get("FRAMEWORK_WHEELS", str(Path.home() / ".cache" / "tpu-watchdog" / "wheels"))
        return Path(root) / self.name

    def wanted(self) -> str:
        low = ".".join(map(str, self.minimum))
        return f">= {low}" + (f", < {'.'.join(map(str, self.below))}" if self.below else "")

    def python(self) -> str | None:
        """$NAME_PYTHON if set and fit (else None), otherwise the Python `find_python` picks."""
        chosen = os.environ.get(f"{self.name.upper()}_PYTHON")
        if chosen is None:
            return find_python(self.minimum, self.below)
        version = _version(chosen)
        fits = (
            version is not None and version >= self.minimum and (self.below is None or version < self.below)
        )
        return chosen if fits else None

    def where(self) -> str:
        """Where `python()` looked, for the messages."""
        chosen = f"{self.name.upper()}_PYTHON"
        return f"{chosen}={os.environ[chosen]}" if chosen in os.environ else "PATH or pyenv"

    def installed(self) -> bool:
        stamp = self.venv / INSTALLED
        return stamp.exists() and stamp.stat().st_mtime >= self.requirements.stat().st_mtime


MAXTEXT = Framework("maxtext", (3, 12), None)
PAX = Framework("pax", (3, 10), (3, 11))
FRAMEWORKS = {f.name: f for f in (MAXTEXT, PAX)}


@functools.cache
def _version(python: str) -> tuple[int, int] | None:
    """Its (major, minor), asked once per interpreter and process (-S -E: no site, no environment, so a
    dozen pyenv Pythons answer in a fraction of the time)."""
    try:
        out = subprocess.run(
            [python, "-S", "-E", "-c", "import sys; sys.stdout.write('%d %d' % sys.version_info[:2])"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    except OSError:
        return None
    parts = out.stdout.split()
    return (int(parts[0]), int(parts[1])) if out.returncode == 0 and len(parts) == 2 else None


def _fits(version: tuple[int, int] | None, minimum: tuple[int, int], below: tuple[int, int] | None) -> bool:
    return version is not None and version >= minimum and (below is None or version < below)


def candidates() -> list[str]:
    """python3.N on PATH (N from 19 down to 10), then every pyenv version's bin/python."""
    found = [p for n in range(19, 9, -1) if (p := shutil.which(f"python3.{n}"))]
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    versions = sorted(
        (root / "versions").glob("3.*"), key=lambda p: [int(x) for x in re.findall(r"\d+", p.name)]
    )
    found += [str(v / "bin" / "python") for v in reversed(versions) if (v / "bin" / "python").exists()]
    return found


def find_python(minimum: tuple[int, int], below: tuple[int, int] | None = None) -> str | None:
    """The oldest Python that runs, is at least `minimum` and older than `below`: a framework was verified
    on the oldest it takes, and a newer one may lack wheels for its pinned packages."""
    versions = {python: _version(python) for python in candidates()}
    usable = [(v, python) for python, v in versions.items() if v is not None and _fits(v, minimum, below)]
    return min(usable)[1] if usable else None


RUN_THEM = "FRAMEWORK_TESTS"  # set to 1 by `make test-frameworks`: the framework tests run only then


def required() -> bool:
    """Under CI (`CI=true`, as CI sets it) the framework tests that `make test-frameworks` asks for must run:
    a framework whose Python or venv cannot be had is a failure there, never a quiet skip."""
    return os.environ.get("CI") == "true" and os.environ.get(RUN_THEM) == "1"


def skip_reason(framework: Framework) -> str | None:
    """Why the framework's tests do not run here, or None: they do. `make test` leaves them out: they add
    1-2 min to a suite whose goal is 3 (docs/benchmarks.md, "Framework set-up and tests")."""
    if framework.python() is None:
        return f"{framework.name} needs Python {framework.wanted()}, none found ({framework.where()})"
    if os.environ.get(RUN_THEM) != "1":
        return (
            f"`make test` leaves the {framework.name} tests out (1-2 min more than its 3-minute goal): "
            f"`make test-frameworks` sets up {framework.venv} and runs them"
        )
    if not framework.installed():
        return (
            f"the {framework.name} venv {framework.venv} is not set up: `make {framework.name}-setup` builds "
            "it (`make test-frameworks` does)"
        )
    return None


def _pip(venv: Path, *args: str, quiet: bool = False) -> int:
    """pip in the venv, bounded by SETUP_TIMEOUT (a timeout is a failure, said so)."""
    command = [str(venv / "bin" / "python"), "-m", "pip", *args]
    hush = subprocess.DEVNULL if quiet else None
    try:
        done = subprocess.run(command, timeout=SETUP_TIMEOUT, check=False, stdout=hush, stderr=hush)
    except subprocess.TimeoutExpired:
        sys.stdout.write(f"pip {args[0]} took more than {SETUP_TIMEOUT:.0f} s (FRAMEWORK_SETUP_TIMEOUT)\n")
        return 1
    return done.returncode


def setup(framework: Framework) -> int:
    """Build the venv from the pinned list, through the wheel cache. 0 also when there is no Python for it
    (said on stdout: its tests are then reported SKIPPED with the reason)."""

    def say(text: str) -> None:
        sys.stdout.write(f"{framework.name}-setup: {text}\n")
        sys.stdout.flush()

    if framework.installed():
        return 0
    python = framework.python()
    if python is None:
        if required():
            say(f"no Python {framework.wanted()} ({framework.where()}): under CI the {framework.name} "
                "tests must run, so this is a failure")  # fmt: skip
            return 1
        say(f"no Python {framework.wanted()} ({framework.where()}): the {framework.name} tests will be "
            "reported SKIPPED")  # fmt: skip
        return 0
    say(f"{python} -m venv {framework.venv}, then {framework.requirements}")
    shutil.rmtree(framework.venv, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(framework.venv)], check=True, timeout=SETUP_TIMEOUT)
    framework.wheels.mkdir(parents=True, exist_ok=True)
    pinned = ["--no-deps", "-r", str(framework.requirements)]
    # --no-compile: byte-compiling 2-3 GB of packages at install is most of the install's CPU; Python
    # compiles what a test imports, when it imports it.
    offline = ["install", "-q", "--no-compile", "--no-index", "--find-links", str(framework.wheels), *pinned]
    if _pip(framework.venv, *offline, quiet=True) != 0:  # not all in the wheel cache: fetch what is missing
        say(f"downloading what {framework.wheels} lacks")
        if _pip(framework.venv, "download", "-q", "-d", str(framework.wheels), *pinned) != 0:
            return 1
        if _pip(framework.venv, *offline) != 0:
            return 1
    (framework.venv / INSTALLED).touch()
    say(f"{framework.venv} is ready")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("python", "setup") or argv[1] not in FRAMEWORKS:
        sys.stderr.write(f"usage: frameworks.py python|setup {'|'.join(FRAMEWORKS)}\n")
        return 2
    framework = FRAMEWORKS[argv[1]]
    if argv[0] == "setup":
        return setup(framework)
    python = framework.python()
    if python is None:
        sys.stderr.write(f"no Python {framework.wanted()} ({framework.where()})\n")
        return 1
    sys.stdout.write(python + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
