# pyum — one entry point for set-up, running, testing and benchmarking.
# Every target creates .venv and installs what it needs on first use.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.pyum-installed
BENCH_STAMP := $(VENV)/.pyum-bench-installed

# pyum runs from its source tree (an editable install): let Python keep the compiled bytecode of
# its modules even where the environment says not to (PYTHONDONTWRITEBYTECODE, set on some build
# images), or every daemon and tool a test or bench starts compiles ~150 modules again (0.4-0.6 s
# of each start on a 2-core machine; the Store's restart figure in bench/store includes it).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: all run test lint types unit bench proto clean distclean

all: test

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $(STAMP)

proto: $(STAMP)
	$(BIN)/python -m umcore.monitor.protogen

## run: the local topology on loopback with embedded defaults, in the foreground (Ctrl-C stops it)
run: $(STAMP) proto
	$(BIN)/python -m umcore.tools.topology $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check umcore daemons tests bench
	$(BIN)/ruff format --check umcore daemons tests bench

types: $(STAMP) proto
	$(BIN)/mypy

unit: $(STAMP) proto
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

## test: lint, strict types on umcore, and the whole test suite
test: lint types unit

## bench: the benchmarks; each prints its figures as ratios against a baseline measured in the same run
bench: $(BENCH_STAMP) proto
	$(BIN)/python -m bench

# the benchmarks' own baselines (nats-py: bench/persist's JetStream row, with Debian's nats-server)
$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[test,bench]'
	@touch $(BENCH_STAMP)

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist *.egg-info
	find . -name __pycache__ -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
