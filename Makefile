# Every target sets itself up on a fresh Debian/Ubuntu machine as root: system packages with apt-get,
# Python packages in .venv (the project installed editable). Re-running is cheap: each step checks first.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# libsystemd-dev + pkg-config: systemd-python builds from source. lsof, psmisc (fuser): what users compare
# `holders` against, used by the benchmarks and tests. prometheus: promtool and a real server for the tests.
# systemd-container: systemd-nspawn, a real systemd manager for the unit tests.
# lintian checks the .deb; the python3-* packages are the .deb's dependencies, needed on this machine to
# install it in a container that boots this machine's own root (tests/packaging/test_deb.py).
# `make demo` needs only what builds the runtime dependencies (systemd-python from source): DEMO_APT, and the
# project with no extras (no test tools, no jax), so a fresh machine runs it well under a minute.
DEMO_APT := libsystemd-dev pkg-config gcc python3-dev
APT_PACKAGES := $(DEMO_APT) lsof psmisc prometheus systemd-container \
	lintian python3-requests python3-urllib3 python3-psutil python3-systemd python3-prometheus-client
INSTALLED := $(VENV)/.installed
DEMO_INSTALLED := $(VENV)/.installed-demo

.PHONY: all setup system-packages demo-packages maxtext-setup pax-setup demo test test-frameworks lint typecheck unit bench deb clean

all: test

# apt-get install what of $(1) is missing (apt-get update first, once, only if something is).
define apt_install
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "apt-get install:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
endef

system-packages:
	$(call apt_install,$(APT_PACKAGES))

demo-packages:
	$(call apt_install,$(DEMO_APT))

$(BIN)/python:
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv; }
	$(PYTHON) -m venv $(VENV)

$(INSTALLED): pyproject.toml | $(BIN)/python system-packages
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,e2e]'
	@touch $@

setup: system-packages $(INSTALLED)

# The framework tests (tests/system/test_maxtext.py, test_pax.py) run MaxText (Python >= 3.12) and Pax
# (Python 3.10) in venvs of their own (.venv-maxtext, .venv-pax), each from a pinned list
# (tests/requirements-NAME.txt; --no-deps: the list is the whole environment). tests/support/frameworks.py
# finds the Python (PATH or pyenv, or MAXTEXT_PYTHON / PAX_PYTHON) and keeps the wheels in a cache of its
# own (~/.cache/tpu-watchdog/wheels, FRAMEWORK_WHEELS): keep that directory between CI runs. Without such a
# Python it says so and those tests are reported SKIPPED with the reason. Each pip command is bounded by
# FRAMEWORK_SETUP_TIMEOUT (1800 s). Time and disk: docs/benchmarks.md ("Framework set-up").
maxtext-setup pax-setup:
	$(PYTHON) tests/support/frameworks.py setup $(@:-setup=)

# The runtime dependencies only; a venv set up for the tests (INSTALLED) has them already.
$(DEMO_INSTALLED): pyproject.toml | $(BIN)/python demo-packages
	@if [ ! -f $(INSTALLED) ] || [ $(INSTALLED) -ot pyproject.toml ]; then \
	  $(BIN)/python -m pip install -q -e .; fi
	@touch $@

demo: $(DEMO_INSTALLED)
	$(BIN)/tpu-watchdog demo

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

typecheck: setup
	$(BIN)/mypy

# The suite runs on TEST_WORKERS processes (pytest-xdist). Most of its time is spent waiting on real
# processes, servers and deadlines, not computing, so more workers than the 2 cores here pay off, up to a
# point: 5 was about 15% faster than 4 but the fleet test (50 daemons in one process) failed once in four
# runs beside another engineer's suite; at 6 and 8 the soak, the fleet and 500 holders failed when the
# machine was busy. The measurements are in docs/benchmarks.md ("make test"). --dist loadgroup: each test
# goes to the next free worker, a group (tests/conftest.py) to one worker. PYTHONDONTWRITEBYTECODE is unset
# for the run so the bytecode of the tests (and of what they start) is cached in __pycache__ (ignored by
# git): else every worker compiles and assert-rewrites every test module again, and every daemon started
# compiles too.
TEST_WORKERS ?= 4

unit: setup
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup

# The MaxText and Pax end-to-end tests, with their set-up (FRAMEWORK_TESTS=1: they run only then). Not part
# of `make test`, which reports them SKIPPED naming this target, to keep its 3-minute goal; .ci/run runs this
# target after `make test`, and there (CI=true) a framework that cannot be set up fails instead of skipping.
test-frameworks: setup maxtext-setup pax-setup
	FRAMEWORK_TESTS=1 PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -rs tests/system/test_maxtext.py tests/system/test_pax.py

test: lint typecheck unit

bench: setup
	$(BIN)/python -m bench

deb:
	packaging/deb/build.sh dist

clean:
	rm -rf $(VENV) .venv-maxtext .venv-pax dist build .mypy_cache .pytest_cache .ruff_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
