"""The import rules ([tool.importlinter] in pyproject.toml) bite: `lint-imports` on a copy of the package
with one forbidden import planted fails, naming the rule and the importer; the untouched copy passes."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10, where tomli is the same parser
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
# Beside this Python, or where $LINT_IMPORTS says: import-linter needs Python >= 3.11, and the suite also runs
# on 3.10 (packaging/deb/check-jammy-versions.sh, which points this at .venv's). The rules are the source's.
LINT_IMPORTS = Path(os.environ.get("LINT_IMPORTS") or Path(sys.executable).with_name("lint-imports"))
TOP = "\nimport {}  # noqa\n"
LAZY = "\n\ndef _planted() -> None:\n    import {}  # noqa\n"  # a function-level import counts too


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` on the copy in `tree` (PYTHONPATH puts it before the installed package)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(tree / "pyproject.toml")],
        cwd=tree, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of watchdog/ and pyproject.toml to plant imports in."""
    shutil.copytree(REPO / "watchdog", tmp_path / "watchdog", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    return tmp_path


def plant(tree: Path, module: str, code: str) -> None:
    path = tree / (module.replace(".", "/") + ".py")
    with path.open("a", encoding="utf-8") as handle:
        handle.write(code)


def test_the_copy_as_it_is_keeps_every_contract(tree: Path) -> None:
    done = lint_imports(tree)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " broken" not in done.stdout.lower().replace("0 broken", "")


@pytest.mark.parametrize(
    ("module", "code", "contract"),
    [
        ("watchdog.core.policy", TOP.format("requests"), "core: the standard library only"),
        ("watchdog.core.clock", LAZY.format("watchdog.metadata.keys"), "layers:"),
        ("watchdog.config.settings", LAZY.format("watchdog.surface.hooks"), "layers:"),  # the old cycle
        ("watchdog.surface.metrics", TOP.format("watchdog.commands.status"), "layers:"),
        ("watchdog.host.procfs", TOP.format("urllib3"), "requests, urllib3: metadata only"),
        ("watchdog.commands.holders", LAZY.format("psutil"), "psutil: host only"),
        (
            "watchdog.daemon.draining",
            TOP.format("watchdog.fake.store"),
            "fake: imported by commands only",
        ),
        ("watchdog.commands.drill", TOP.format("watchdog.daemon.loop"), "commands: the daemon through"),
        ("watchdog.commands.demo", LAZY.format("watchdog.commands.status"), "commands: one module per"),
        ("watchdog.config.values", LAZY.format("watchdog.config.settings"), "no import cycles"),
    ],
)
def test_a_planted_forbidden_import_breaks_its_contract(
    tree: Path, module: str, code: str, contract: str
) -> None:
    plant(tree, module, code)
    done = lint_imports(tree)
    assert done.returncode == 1, done.stdout + done.stderr
    broken = re.search(r"Broken contracts\n-+\n(.*)", done.stdout, re.DOTALL)
    assert broken is not None, done.stdout
    assert contract in broken.group(1)
    assert "." + module.rpartition(".")[2] + " " in broken.group(1)  # the importer (cycles: relative name)


def test_an_import_for_type_checking_only_is_no_dependency(tree: Path) -> None:
    plant(
        tree,
        "watchdog.core.policy",
        "\nimport typing\n\nif typing.TYPE_CHECKING:\n    import watchdog.config\n",
    )
    done = lint_imports(tree)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_new_module_directly_in_watchdog_needs_a_layer(tree: Path) -> None:
    (tree / "watchdog" / "helpers.py").write_text('"""Planted."""\n')
    done = lint_imports(tree)
    assert done.returncode != 0
    assert "watchdog.helpers" in done.stdout + done.stderr


def test_core_is_forbidden_every_third_party_dependency() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    contract = next(c for c in project["tool"]["importlinter"]["contracts"] if c["name"].startswith("core:"))
    modules_of = {}  # distribution name -> the top-level modules it installs
    for module, distributions in importlib.metadata.packages_distributions().items():
        for distribution in distributions:
            modules_of.setdefault(_normal(distribution), set()).add(module)
    for requirement in project["project"]["dependencies"]:
        name = _normal(re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0])
        modules = modules_of.get(name, {name.replace("-", "_")})  # not installed here: tomli on 3.11+
        assert modules & set(contract["forbidden_modules"]), f"{requirement}: core may import it"


def _normal(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()
