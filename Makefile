# The README's commands. Each target creates the virtual environment and installs what it
# needs on a bare machine (Python 3.11+; `make test` also installs Debian's chromium).
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
export PREFECT_SERVER_ANALYTICS_ENABLED := false

.PHONY: demo test lint bench install browser clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[pipeline,dev]'
	touch $@

install: $(STAMP)

## make demo: simulate a 128-GPU fleet week, ingest, build, report; prints the report's path
demo: $(STAMP)
	$(VENV)/bin/gpufleet demo

## make test: lint, type-check and run the whole test suite (installs chromium if missing)
test: $(STAMP) browser lint
	$(VENV)/bin/pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the browser test"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; }

## make bench: the benchmarks (the collector, then the 1,000-GPU pipeline: about an hour);
## BENCH=collector or BENCH=pipeline runs one of them
bench: $(STAMP)
	$(PY) -m bench.run $(if $(BENCH),--suite $(BENCH),)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
