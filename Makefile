# `make run` and `make test` are the two commands the README opens with.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Test processes: the end-to-end and fault tests mostly wait on real workers and their
# own servers, so they run side by side; tests/conftest.py puts the rest in two groups,
# each on one process.
TEST_WORKERS ?= 4

.PHONY: run test lint

# Running needs cronchain and what it depends on; the tests need the dev extras too
# (Django, selenium, hypothesis, ...). Each stamp says what the venv holds.
$(VENV)/.run: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.dev: $(VENV)/.run
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

run: $(VENV)/.run
	$(BIN)/cronchain up examples/demo.yaml

test: $(VENV)/.dev
	bash scripts/services.sh
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup

lint: $(VENV)/.dev
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/lint-imports --no-cache
