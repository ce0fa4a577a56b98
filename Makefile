# The two commands (README): `make demo` sets up and runs the mix on configs/demo.yaml, then serves
# the UI; `make test` runs the tests. Everything installs into .venv from this repository's files.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export DAGSTER_HOME := $(CURDIR)/.dagster_home
export MIX_CONFIG ?= configs/demo.yaml
# The demo's steps take a second each; a process per step (the multiprocess default, right for real
# mixes) would cost more than it saves. Override with MIX_EXECUTOR=multiprocess.
export MIX_EXECUTOR ?= in_process

.PHONY: demo setup run ui test system-deps clean

demo: setup run ui

$(BIN)/python:
	$(PY) -m venv $(VENV)

setup: $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	mkdir -p $(DAGSTER_HOME) && cp dagster.yaml $(DAGSTER_HOME)/dagster.yaml

run: setup
	$(BIN)/dagster job execute -m mix_assets.definitions -a defs -j rebuild_mix

ui:
	@echo "Dagster UI on http://127.0.0.1:3000 (Ctrl-C to stop)"
	$(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

system-deps:
	bash scripts/install_system_deps.sh

test: setup system-deps
	$(BIN)/python -m pytest -q -ra

clean:
	rm -rf build .dagster_home test-output
