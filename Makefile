# Two commands on a fresh machine:  `make demo`  and  `make test`.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
# pytest workers for `make test` (one per core of a two-core CI runner; 0: all in one process)
TEST_WORKERS ?= 2
# Keep LIBERO's config file private to this venv (docs/getting-started.md, "Environments").
export LIBERO_CONFIG_PATH ?= $(abspath $(VENV))/libero-config
export MUJOCO_GL ?= egl

.PHONY: demo test bench-smoke docs lint system-deps clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip setuptools wheel

system-deps:
	bash scripts/install_system_deps.sh

$(VENV)/.installed-demo: setup.cfg pyproject.toml | $(BIN)/python
	$(MAKE) -s system-deps
	PYTHONWARNINGS=ignore $(BIN)/pip install -q -e '.[libero,service,report,video,record,metrics,fit]'
	touch $@

$(VENV)/.installed-test: setup.cfg pyproject.toml | $(BIN)/python
	$(MAKE) -s system-deps
	PYTHONWARNINGS=ignore $(BIN)/pip install -q -e '.[libero,service,report,video,record,models,test,bench,rlinf,serve,metrics,distrl,docs,wandb,fit]'
	touch $@ $(VENV)/.installed-demo

# ReachPlace under a right and a gameable reward model, a model fitted on those episodes, their
# calibration, one LIBERO episode
demo: $(VENV)/.installed-demo
	$(BIN)/evolve-envs demo --out runs/demo

test: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=20   # tests/docs builds the docs site too

# the benchmark scripts end to end, each for seconds to a minute (minutes in all; not in `make test`)
bench-smoke: $(VENV)/.installed-test
	$(BIN)/python -m pytest -m bench tests/bench

# the docs site, built offline into site/; any warning (a broken link, a bad docstring) fails it
docs: $(VENV)/.installed-test
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) runs site .pytest_cache .ruff_cache
