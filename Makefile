# exitpool: `make help` lists the targets. Everything installs into ./.venv and ./target.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: help demo install dev lint test test-deps test-rust test-python bench docs
.DEFAULT_GOAL := help

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  make %-12s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

install: $(BIN)/python ## build the release wheel and install it into .venv (with the demo's extras)
	$(BIN)/pip install -q ".[aiohttp,report]"

demo: install ## install, then run the main job: the loopback fleet demo, naive vs exitpool
	$(BIN)/exitpool demo

dev: $(BIN)/python ## a quick (dev profile, unoptimised) build installed into .venv with the test extras
	MATURIN_PEP517_ARGS="--profile dev" $(BIN)/pip install -q ".[test]"

# Clippy with the python feature compiles the PyO3 bindings, which need an interpreter to build
# against; without it, it sees the pure core as cargo test builds it, where a core item only the
# bindings use (and lib.rs does not re-export) is dead code.
lint: dev ## rustfmt, clippy (every target, with and without the python feature, warnings are errors), ruff, mypy
	cargo fmt --check
	PYO3_PYTHON=$(abspath $(BIN))/python cargo clippy --all-targets --features python -- -D warnings
	cargo clippy --all-targets -- -D warnings
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m mypy --cache-dir target/mypy-cache python/exitpool

test: test-deps docs test-rust lint test-python ## install what the tests need, build the docs, lint, and run every test (cargo and pytest)

test-deps: ## the system packages the tests use, from Debian when missing (chromium, redis-server)
	bash scripts/test-deps.sh

test-rust: test-deps ## the pure core's tests (no Python involved; the store suite starts redis-server)
	cargo test --quiet

test-python: dev test-deps ## a quick build with the test extras (see dev), then pytest
	$(BIN)/python -m pytest

bench: $(BIN)/python ## the benchmarks (release build)
	$(BIN)/pip install -q ".[bench]"
	$(BIN)/python bench/ring.py
	$(BIN)/python bench/scale.py
	$(BIN)/python bench/memory.py
	$(BIN)/python bench/gateway.py

# The `docs` extra's requirements, quoted for the shell, read from pyproject.toml (their one
# source): the site needs MkDocs only, not the extension that `pip install ".[docs]"` would build.
DOCS_REQUIREMENTS = $(shell sed -n 's/^docs = \[\(.*\)\]$$/\1/p' pyproject.toml | tr -d ',')

docs: $(BIN)/python ## build the manual (docs/) into ./site with mkdocs build --strict
	$(BIN)/pip install -q $(DOCS_REQUIREMENTS)
	$(BIN)/mkdocs build --strict -d site
