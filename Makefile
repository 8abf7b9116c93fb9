# agentloop: `make run` serves on 127.0.0.1:8000; `make test` runs the whole suite.
VENV    ?= .venv
PYTHON  ?= python3
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-stamp
HOST    ?= 127.0.0.1
PORT    ?= 8000

JS      := tests/js
JSSTAMP := $(JS)/node_modules/.installed-stamp

.PHONY: install run test lint bench system-deps js-deps clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,bedrock]'
	touch $(STAMP)

run: install
	$(BIN)/agentloop serve --host $(HOST) --port $(PORT)

# redis-server, bubblewrap, chromium and node come from Debian's packages when the machine lacks them
system-deps:
	@scripts/system-deps.sh

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

# the JavaScript packages the tests drive, exactly as the committed lockfile pins them
js-deps: $(JSSTAMP)

$(JSSTAMP): $(JS)/package.json $(JS)/package-lock.json | system-deps
	cd $(JS) && npm ci --no-audit --no-fund --loglevel=error
	touch $(JSSTAMP)

test: install system-deps js-deps
	@scripts/test.sh

bench: install system-deps
	$(BIN)/python bench/harness.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis $(JS)/node_modules
