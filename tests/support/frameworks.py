"""Where the framework tests find their Python and their venv; also run by the Makefile (stdlib only).

MaxText needs Python >= 3.12, the project itself runs on >= 3.10, so MaxText lives in a venv of its own
(MAXTEXT_VENV, built by `make maxtext-setup` from the pinned tests/requirements-maxtext.txt). `python3
tests/support/frameworks.py python [3.12]` prints the oldest such Python on PATH or under pyenv, or exits 1
saying there is none.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAXTEXT_VENV = REPO / os.environ.get("MAXTEXT_VENV", ".venv-maxtext")  # as the Makefile says
MAXTEXT_MINIMUM = (3, 12)
INSTALLED = ".installed"  # written by the Makefile once every pinned package is in


def _version(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    except OSError:
        return None
    parts = out.stdout.split()
    return (int(parts[0]), int(parts[1])) if out.returncode == 0 and len(parts) == 2 else None


def candidates() -> list[str]:
    """python3.N on PATH (N from 19 down to 10), then every pyenv version's bin/python."""
    found = [p for n in range(19, 9, -1) if (p := shutil.which(f"python3.{n}"))]
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    versions = sorted(
        (root / "versions").glob("3.*"), key=lambda p: [int(x) for x in re.findall(r"\d+", p.name)]
    )
    found += [str(v / "bin" / "python") for v in reversed(versions) if (v / "bin" / "python").exists()]
    return found


def find_python(minimum: tuple[int, int]) -> str | None:
    """The oldest Python that runs and is at least `minimum`: MaxText was verified on the oldest it takes
    (3.12), and a newer one may lack wheels for its pinned packages."""
    versions = {python: _version(python) for python in candidates()}
    usable = [(v, python) for python, v in versions.items() if v is not None and v >= minimum]
    return min(usable)[1] if usable else None


def maxtext_skip_reason(venv: Path = MAXTEXT_VENV, minimum: tuple[int, int] = MAXTEXT_MINIMUM) -> str | None:
    """Why the MaxText tests cannot run here, or None: they can."""
    if (venv / INSTALLED).exists():
        return None
    if find_python(minimum) is None:
        wanted = ".".join(map(str, minimum))
        return f"MaxText needs Python >= {wanted} and there is none on this machine (PATH or pyenv)"
    return f"the MaxText venv {venv} is not set up: `make maxtext-setup` builds it (make test does)"


if __name__ == "__main__":
    if sys.argv[1:2] != ["python"] or len(sys.argv) > 3:
        sys.exit("usage: frameworks.py python [MAJOR.MINOR]  (default: MaxText's minimum)")
    wanted = tuple(int(x) for x in sys.argv[2].split(".")) if len(sys.argv) == 3 else MAXTEXT_MINIMUM
    found = find_python((wanted[0], wanted[1]))
    if found is None:
        sys.exit(f"no Python >= {'.'.join(map(str, wanted))} on PATH or under pyenv")
    sys.stdout.write(found + "\n")
