#!/bin/sh
# Runs the test suite (all but the JAX end-to-end test) on Ubuntu 22.04's Python and python3-* versions, the
# oldest the .deb accepts: python3 3.10, and what jammy ships of each dependency. The .deb uses the
# distribution's packages, so the code must work with these exact versions, not only with the newest.
# Slow (builds systemd-python from source the first time; then the suite): not part of `make test`.
#
#   packaging/deb/check-jammy-versions.sh [PYTEST ARGS...]      (default: tests --ignore=tests/system/test_e2e_jax.py)
# Env: PY310 (a Python 3.10 interpreter; default pyenv's 3.10.13), JAMMY_VENV (default build/jammy-venv).
set -eu

REPO=$(cd "$(dirname "$0")/../.." && pwd)
PY310=${PY310:-/root/.pyenv/versions/3.10.13/bin/python3.10}
VENV=${JAMMY_VENV:-$REPO/build/jammy-venv}

# Ubuntu 22.04 (jammy) main/universe, as shipped (packages.ubuntu.com): python3 3.10.6,
# python3-requests 2.25.1, python3-urllib3 1.26.5, python3-psutil 5.9.0, python3-prometheus-client 0.9.0,
# python3-systemd 234, python3-tomli 1.2.2. PyPI's systemd-python 234 is the same upstream release.
PINS="requests==2.25.1 urllib3==1.26.5 psutil==5.9.0 prometheus-client==0.9.0 systemd-python==234 tomli==1.2.2"
TEST_TOOLS="pytest>=8 pytest-timeout>=2.2 hypothesis>=6.90"

if ! "$PY310" -c 'import sys; assert sys.version_info[:2] == (3, 10)' 2>/dev/null; then
    echo "check-jammy-versions: $PY310 is not a Python 3.10 (set PY310=/path/to/python3.10)" >&2
    exit 2
fi

stamp="$VENV/.jammy-pins"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$PINS" ]; then
    rm -rf "$VENV"
    "$PY310" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    # systemd-python 234 builds from source: libsystemd-dev, pkg-config and gcc must be installed.
    # --no-build-isolation would need setuptools in the venv; the default isolated build is fine.
    "$VENV/bin/python" -m pip install -q $PINS $TEST_TOOLS
    # The project itself, without letting pip upgrade any pinned dependency.
    "$VENV/bin/python" -m pip install -q --no-deps -e "$REPO"
    echo "$PINS" > "$stamp"
fi

echo "check-jammy-versions: $("$VENV/bin/python" --version) with:"
"$VENV/bin/python" -m pip list --format=freeze 2>/dev/null \
    | grep -iE '^(requests|urllib3|psutil|prometheus.client|systemd.python|tomli)==' | sed 's/^/  /'

cd "$REPO"
if [ "$#" -eq 0 ]; then
    set -- tests --ignore=tests/system/test_e2e_jax.py
fi
# No cache dir: this run must not disturb the main venv's pytest cache.
exec "$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
