# The two commands a new user needs are `make demo` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.kit-installed
TEST_STAMP := $(VENV)/.kit-test-extras

.PHONY: demo test setup lint unit clean-venv stats-table repro-table seq-table

# The test tiers run on pytest-xdist workers: the unit tier on UNIT_WORKERS (2 on 2 cores: 143 s against 165 s
# with 4, measured), the others on SLOW_WORKERS (4: the docker and Slurm groups each hold a worker for long
# stretches of waiting; 5 was slower: the docker, slow and gpu tiers in 909 s against 786 s with 4, one warm clone,
# 2026-12-06). --dist loadgroup keeps the tests that share something outside their tmp_path (Docker,
# the Slurm cluster, shared caches, a module-scoped fixture) in one group each, run by one worker:
# tests/conftest.py picks the groups from markers and fixtures, and prints each tier's time after every run.
# The docker + slow + gpu tiers start their longest groups first (tests/conftest.py START_FIRST, in collection
# order: --no-loadscope-reorder keeps xdist from sorting the groups by their number of tests instead).
UNIT_WORKERS ?= 2
SLOW_WORKERS ?= 4
PYTEST := $(BIN)/python -m pytest --dist loadgroup --durations=15
# Written byte code (__pycache__, gitignored) spares every `python -m kit` a test starts recompiling kit, and
# every worker rewriting the test modules' asserts again: PYTHONDONTWRITEBYTECODE=1, where a shell exports it,
# is emptied (Python reads an empty value as unset).
test unit: export PYTHONDONTWRITEBYTECODE :=
# The test modules that mark a test `quiet`, in path order (collecting only them spares the quiet step 6 s of
# collecting every module; none found: every module, as before).
QUIET_FILES := $(sort $(shell grep -rlE --include='test_*.py' 'mark\.quiet\b' tests))
# When this make started (setup included in `make test`'s total).
MAKE_START := $(shell date +%s)

# The fast unit tier: its selection, and a recipe that runs a command and prints its wall time ($(1): what).
UNIT := not docker and not slow and not gpu
define timed
	@start=$$(date +%s); $(2); rc=$$?; \
	echo "$(1): $$(( $$(date +%s) - start )) s wall"; exit $$rc
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
# and a Docker engine when none answers. Installed without byte-compiling their thousands of modules
# (--no-compile: the tests import a fraction of them, and `make test` writes the byte code of those).
$(TEST_STAMP): $(STAMP) Makefile
	$(BIN)/python -m pip install -q --no-compile torch==2.13.0 triton==3.6.0 "transformers[serving]==5.24.0" \
		-e images/transformers
	touch $(TEST_STAMP)

## The tiny model experiments/transformers-cpu.yaml serves (its header, and `kit validate`'s hint while it is missing,
## give this command): kit's test extras first (transformers, torch, kit_hf; none after `make demo` alone), then the
## model, deterministic, in seconds. Order-only: newer extras never make it again.
build/models/transformers-tiny-cpu: | $(TEST_STAMP)
	$(BIN)/python -m kit_hf.make_model tiny-cpu $@ --seed 0

## Set everything up and run the embedded default experiment end to end (CPU only, no Docker). The example
## manifests are signed by the repo's published EXAMPLE key, which kit never trusts by default: --trust allowed_signers.
demo: setup
	$(BIN)/kit verify --trust allowed_signers experiments/demo.yaml
	$(BIN)/kit run --trust allowed_signers experiments/demo.yaml

lint: setup
	$(BIN)/ruff check kit tests benchmarks
	$(BIN)/mypy

# The images the docker and Slurm tiers use are built in the background while the unit tier runs (it needs no
# Docker; their downloads and unpacking overlap its CPU work instead of holding docker-tier workers): started after
# ensure-slurm, not beside it, since the base image's build may install mmdebstrap with apt-get, and apt-get update
# does not wait for another apt's lock. Nothing waits for that job: each build script locks its image (flock), so a
# fixture that asks for an image while it is built waits for that build and gets its ID; a build that failed there
# is built again by its fixture, which reports why. Its output is in PREBUILD_LOG (a new file each time: a job left by
# an interrupted make, which ignores Ctrl-C as every background job of a shell without job control does and runs to
# its end, keeps writing to the old one), its summary printed after the tiers.
PREBUILD_LOG := $(VENV)/prebuild.log

## Set everything up (including a Docker engine when none answers) and run every test tier this machine supports:
## the unit tier first, then the docker, slow and gpu tiers (ruff and mypy beside them: alone, mypy held one of the
## two cores for 45-53 s while the other idled), then the few `quiet` tests alone (a sequential run and an
## until-decided reproduction that must stop early: with the parallel tiers loading 2 cores their load clients are
## flagged client-bound, so they could only ever skip there); every test runs once. Each step's wall time is printed,
## each tier's too (pytest's "time per tier" section), and the total.
test: $(TEST_STAMP)
	@echo "setup: $$(( $$(date +%s) - $(MAKE_START) )) s wall"
	./scripts/ensure-docker
	./scripts/ensure-slurm
	@rm -f $(PREBUILD_LOG); PYTHON=$(abspath $(BIN)/python) scripts/prebuild-images > $(PREBUILD_LOG) 2>&1 < /dev/null & \
	echo "images: the docker and Slurm tiers' three images build in the background (log: $(PREBUILD_LOG))"
	$(call timed,unit tier (budget 120 s on 2 cores),$(PYTEST) -n $(UNIT_WORKERS) -m "($(UNIT)) and not quiet")
	@start=$$(date +%s); ($(BIN)/ruff check kit tests benchmarks && $(BIN)/mypy) > $(VENV)/lint.log 2>&1 & lint=$$!; \
	$(PYTEST) -n $(SLOW_WORKERS) --no-loadscope-reorder -m "not ($(UNIT)) and not quiet"; rc=$$?; \
	echo "docker + slow + gpu tiers (ruff and mypy beside them): $$(( $$(date +%s) - start )) s wall"; \
	wait $$lint; lint_rc=$$?; cat $(VENV)/lint.log; echo "ruff and mypy: exit $$lint_rc"; \
	grep -h '^prebuild-images: ' $(PREBUILD_LOG) 2>/dev/null; \
	[ $$rc -eq 0 ] && [ $$lint_rc -eq 0 ]
	$(call timed,quiet tests (alone),$(PYTEST) -n 0 -m quiet $(QUIET_FILES))
	@echo "make test: $$(( $$(date +%s) - $(MAKE_START) )) s wall in all, setup included (budget 20 minutes on 2 cores)"

## The fast tier (no Docker, no GPU, nothing slow; torch optional): under 2 minutes on 2 cores.
## It prints its 15 slowest tests and its wall time.
unit: setup
	$(call timed,unit tier (budget 120 s on 2 cores),$(PYTEST) -n $(UNIT_WORKERS) -m "$(UNIT)")

clean-venv:
	rm -rf $(VENV)

## Rerun the full statistics simulation: first its slow tests at the full run's counts (KIT_SIM_TIER=full; `make test`
## runs them at fewer experiments), which must pass, then the table in docs/statistics.md (~3 minutes on one core each).
stats-table: setup
	KIT_SIM_TIER=full $(BIN)/python -m pytest -q -m slow tests/stats/test_stats_simulation.py
	PYTHONPATH=. $(BIN)/python -m tests.stats.sim --write-table docs/statistics.md

## Rerun the sequential-design simulations (A/A family-wise error, the saving against a fixed design of equal power;
## the repeated confidence intervals' coverage, tests/stats/sim_rci.py)
## and rewrite its table in docs/statistics.md.
seq-table: setup
	PYTHONPATH=. $(BIN)/python -m tests.stats.sim_sequential --write-table docs/statistics.md

## Rerun the reproduce-verdict simulations and rewrite their tables in docs/reproduce.md: the fixed rule (2000 pairs
## a row) and kit reproduce --until-decided against it (4000 a row, ~10 minutes on one core).
repro-table: setup
	PYTHONPATH=. $(BIN)/python -m tests.stats.sim_reproduce --write-table docs/reproduce.md
	PYTHONPATH=. $(BIN)/python -m tests.stats.sim_reproduce_until --write-table docs/reproduce.md
