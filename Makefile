# agentloop: `make run` serves on 127.0.0.1:8000; `make test` runs the whole suite.
VENV    ?= .venv
PYTHON  ?= python3
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-stamp
HOST    ?= 127.0.0.1
PORT    ?= 8000

.PHONY: install run test lint bench system-deps clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,bedrock]'
	touch $(STAMP)

run: install
	$(BIN)/agentloop serve --host $(HOST) --port $(PORT)

# redis-server and bubblewrap come from Debian's packages when the machine lacks them
system-deps:
	@scripts/system-deps.sh

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

test: install system-deps
	@scripts/test.sh

bench: install system-deps
	$(BIN)/python bench/harness.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
