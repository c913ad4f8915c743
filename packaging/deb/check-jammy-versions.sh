#!/bin/sh
# Runs the test suite (all but the JAX end-to-end test) on Ubuntu 22.04's Python and python3-* versions, the
# oldest the .deb accepts: python3 3.10, and what jammy ships of each dependency. The .deb uses the
# distribution's packages, so the code must work with these exact versions, not only with the newest.
# `.ci/run` runs it after `make test`; not part of `make test` itself (its own venv, a second run).
#
#   packaging/deb/check-jammy-versions.sh [PYTEST ARGS...]
#       default: tests --ignore=tests/system/test_e2e_jax.py -n JAMMY_WORKERS --dist loadgroup -rs
# Env: PY310 (a Python 3.10 interpreter; default: python3.10 on PATH, else the newest 3.10 under pyenv's
# root), JAMMY_VENV (default build/jammy-venv), JAMMY_WORKERS (pytest-xdist workers, default 4, as `make unit`).
#
# The venv holds the pins below and the project's test tools (its `dev` extra: pytest, xdist, ...) resolved
# under those pins as constraints, so no tool can upgrade a pinned library and no test fails for a missing
# tool. It is rebuilt when the pins or pyproject.toml change. import-linter needs Python >= 3.11: the import
# rules are the source's, not the libraries', so their tests use .venv's lint-imports (`make setup`).
# Time on 2 cores: docs/benchmarks.md ("Ubuntu 22.04's versions").
set -eu

REPO=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${JAMMY_VENV:-$REPO/build/jammy-venv}
WORKERS=${JAMMY_WORKERS:-4}

# Ubuntu 22.04 (jammy) main/universe, as shipped (packages.ubuntu.com): python3 3.10.6,
# python3-requests 2.25.1, python3-urllib3 1.26.5, python3-psutil 5.9.0, python3-prometheus-client 0.9.0,
# python3-systemd 234, python3-tomli 1.2.2. PyPI's systemd-python 234 is the same upstream release.
PINS="requests==2.25.1 urllib3==1.26.5 psutil==5.9.0 prometheus-client==0.9.0 systemd-python==234 tomli==1.2.2"

is_py310() {
    [ -n "$1" ] && "$1" -c 'import sys; assert sys.version_info[:2] == (3, 10)' 2>/dev/null
}

if [ -n "${PY310:-}" ]; then
    if ! is_py310 "$PY310"; then
        echo "check-jammy-versions: PY310=$PY310 is not a working Python 3.10" >&2
        exit 2
    fi
else
    PY310=$(command -v python3.10 2>/dev/null || true)
    if ! is_py310 "$PY310"; then
        # The newest 3.10.N under pyenv, by N (zero-padded: as text, 3.10.9 would come after 3.10.13).
        PY310=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.10.* 2>/dev/null \
            | awk -F. '{ printf "%04d %s\n", $NF, $0 }' | sort | tail -n 1 | cut -d' ' -f2-)
        PY310=${PY310:+$PY310/bin/python3.10}
    fi
    if ! is_py310 "$PY310"; then
        echo "check-jammy-versions: no Python 3.10 on PATH or under ${PYENV_ROOT:-$HOME/.pyenv}/versions;" \
            "install one (pyenv install 3.10) or set PY310=/path/to/python3.10" >&2
        exit 2
    fi
fi

LINT_IMPORTS=${LINT_IMPORTS:-$REPO/.venv/bin/lint-imports}
if [ ! -x "$LINT_IMPORTS" ]; then
    echo "check-jammy-versions: no $LINT_IMPORTS (import-linter needs Python >= 3.11): run make setup first," \
        "or set LINT_IMPORTS=/path/to/lint-imports" >&2
    exit 2
fi
export LINT_IMPORTS

want="$PINS $(sha256sum "$REPO/pyproject.toml" | cut -d' ' -f1)"
stamp="$VENV/.jammy-pins"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    rm -rf "$VENV"
    "$PY310" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    echo "$PINS" | tr ' ' '\n' > "$VENV/jammy-constraints.txt"
    # systemd-python 234 builds from source: libsystemd-dev, pkg-config and gcc must be installed (`make
    # setup` installs them). The project editable with its test tools; the constraints keep every pin.
    "$VENV/bin/python" -m pip install -q -c "$VENV/jammy-constraints.txt" $PINS -e "$REPO[dev]"
    echo "$want" > "$stamp"
fi

echo "check-jammy-versions: $("$VENV/bin/python" --version) with:"
"$VENV/bin/python" -m pip list --format=freeze 2>/dev/null \
    | grep -iE '^(requests|urllib3|psutil|prometheus.client|systemd.python|tomli)==' | sed 's/^/  /'

cd "$REPO"
if [ "$#" -eq 0 ]; then
    set -- tests --ignore=tests/system/test_e2e_jax.py -n "$WORKERS" --dist loadgroup -rs
fi
# The venv's tools first on PATH: tests run `lint-imports`, `ruff` and the like by name. No cache dir: this run
# must not disturb the main venv's pytest cache.
PATH="$VENV/bin:$PATH" PYTHONDONTWRITEBYTECODE='' exec "$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
