# One task runner for everything. `make up` starts the platform, `make test` runs every gate.
# Both set themselves up on a fresh machine: the virtualenv, the package, the broker's jars.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: up down test lint types unit integration bench clean

# Debian packages the test suite drives: Chromium for the UI test (never a downloaded browser),
# iproute2 and nftables for the network-partition scenario. Installed only when missing.
SYSTEM_TOOLS := /usr/bin/chromium /usr/sbin/ip /usr/sbin/nft
APT_PACKAGES := chromium iproute2 nftables

$(STAMP): pyproject.toml
	@missing=""; for tool in $(SYSTEM_TOOLS); do [ -x $$tool ] || missing=yes; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES); \
	  else echo "note: install $(APT_PACKAGES) (Debian) for the browser and network-partition tests"; fi; \
	fi
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
