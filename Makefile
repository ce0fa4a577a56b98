# The two commands (README): `make demo` sets up and runs the mix on configs/demo.yaml, then serves
# the UI; `make test` runs the tests. Everything installs into .venv from this repository's files.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# the instance config is ./dagster.yaml (tracked); it keeps run history in .dagster/ (git-ignored)
export DAGSTER_HOME := $(CURDIR)
export MIX_CONFIG ?= configs/demo.yaml
# Steps run in the run's process unless MIX_EXECUTOR says otherwise (multiprocess, k8s): mix_assets/jobs.py

.PHONY: demo setup run ui test system-deps clean

demo: setup run ui

$(BIN)/python:
	$(PY) -m venv $(VENV)

setup: $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'

run: setup
	$(BIN)/dagster job execute -m mix_assets.definitions -a defs -j rebuild_mix

# dg compares the active venv with the project's and warns when none is active: name ours
ui:
	@echo "Dagster UI on http://127.0.0.1:3000 (Ctrl-C to stop)"
	VIRTUAL_ENV=$(CURDIR)/$(VENV) $(BIN)/dg dev -h 127.0.0.1 -p 3000

system-deps:
	bash scripts/install_system_deps.sh

test: setup system-deps
	$(BIN)/python -m pytest -q -ra

clean:
	rm -rf build test-output
	rm -rf .dagster
