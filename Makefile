# `make run` and `make test` are the two commands the README opens with.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test lint

$(BIN)/cronchain: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

run: $(BIN)/cronchain
	$(BIN)/cronchain up examples/demo.yaml

test: $(BIN)/cronchain
	bash scripts/services.sh
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -p no:cacheprovider

lint: $(BIN)/cronchain
	$(BIN)/ruff check . && $(BIN)/ruff format --check .
