# `make run` and `make test` are the two commands the README opens with.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Test processes, each taking the next test when it is free: the end-to-end and fault
# tests mostly wait on real workers and their own servers, and four processes on two
# cores keep the cores busy through those waits; six overloaded them (tests/conftest.py
# keeps a module whose tests share a module-scoped fixture in one process).
TEST_WORKERS ?= 4

.PHONY: run test lint docs screenshots

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

$(VENV)/.docs: $(VENV)/.run
	$(BIN)/pip install --quiet -e '.[docs]'
	touch $@

# The site, built strictly: a broken link, a missing page or a reference entry the code
# has and the pages lack is an error. It opens at docs/_build/html/index.html.
docs: $(VENV)/.docs
	$(BIN)/sphinx-build -W --keep-going -n -E -q -b html docs docs/_build/html

# The site's screenshots of the web page, taken by the browser test (Debian's chromium;
# CI=true: without it, or without the services, the test fails rather than skips).
screenshots: $(VENV)/.dev
	CI=true CRONCHAIN_SCREENSHOTS=docs/screenshots $(BIN)/python -m pytest -p no:cacheprovider -q tests/e2e/test_browser.py

run: $(VENV)/.run
	$(BIN)/cronchain up examples/demo.yaml

test: $(VENV)/.dev
	bash scripts/services.sh
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup

lint: $(VENV)/.dev
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/lint-imports --no-cache
