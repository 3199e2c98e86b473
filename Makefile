# One task runner for everything. `make up` starts the platform, `make test` runs every gate.
# Both set themselves up on a fresh machine: the virtualenv, the package, the broker's jars.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: up down test lint types unit integration bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -U pip
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

up: $(STAMP)
	$(BIN)/tickwheel up

down: $(STAMP)
	$(BIN)/tickwheel down

lint: $(STAMP)
	$(BIN)/ruff check .

types: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest tests/unit -q

integration: $(STAMP)
	$(BIN)/pytest tests/integration tests/chaos -q

# The whole gate, as CI runs it: lint, types, then every test (the suite starts its own broker).
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pytest -q

bench: $(STAMP)
	$(BIN)/python -m bench.clients

clean:
	rm -rf $(VENV) .tickwheel compose/kafka-libs .mypy_cache .ruff_cache .pytest_cache
