# The two commands a new user needs are `make demo` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.kit-installed
TEST_STAMP := $(VENV)/.kit-test-extras

.PHONY: demo test setup lint unit clean-venv stats-table

# The fast unit tier: its selection, and the recipe that runs it and prints its wall time.
UNIT := not docker and not slow and not gpu
define run_unit
	@start=$$(date +%s); \
	$(BIN)/python -m pytest -m "$(UNIT)" --durations=15; rc=$$?; \
	echo "unit tier: $$(( $$(date +%s) - start )) s wall (budget 120 s on 2 cores)"; exit $$rc
endef

$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c requirements.lock -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# Test-only extras: the CPU build of torch (for the OEA routing tests; it installs from the local
# wheel file on these machines; pinned in the same command so that transformers cannot move it),
# Triton 3.6.0 (the H200 machine's: the OEA kernels run under its interpreter on the CPU, tests/oea),
# transformers serve 5.24.0 and kit's launcher for it (images/transformers, tests/hfserve),
# and a Docker engine when none answers.
$(TEST_STAMP): $(STAMP) Makefile
	$(BIN)/python -m pip install -q torch==2.13.0 triton==3.6.0 "transformers[serving]==5.24.0" -e images/transformers
	touch $(TEST_STAMP)

## Set everything up and run the embedded default experiment end to end (CPU only, no Docker). The example
## manifests are signed by the repo's published EXAMPLE key, which kit never trusts by default: --trust allowed_signers.
demo: setup
	$(BIN)/kit verify --trust allowed_signers experiments/demo.yaml
	$(BIN)/kit run --trust allowed_signers experiments/demo.yaml

lint: setup
	$(BIN)/ruff check kit tests benchmarks
	$(BIN)/mypy

## Set everything up (including a Docker engine when none answers) and run every test tier this machine supports:
## the unit tier first (its time printed), then the docker, slow and gpu tiers; every test runs once.
test: $(TEST_STAMP)
	./scripts/ensure-docker
	./scripts/ensure-slurm
	$(BIN)/ruff check kit tests benchmarks
	$(BIN)/mypy
	$(run_unit)
	$(BIN)/python -m pytest -m "not ($(UNIT))" --durations=15

## The fast tier (no Docker, no GPU, nothing slow; torch optional): under 2 minutes on 2 cores.
## It prints its 15 slowest tests and its wall time.
unit: setup
	$(run_unit)

clean-venv:
	rm -rf $(VENV)

## Rerun the full statistics simulation (~3 minutes on one core) and rewrite its table in docs/statistics.md.
stats-table: setup
	PYTHONPATH=. $(BIN)/python -m tests.stats.sim --write-table docs/statistics.md
