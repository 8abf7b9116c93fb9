# agentloop: `make run` serves on 127.0.0.1:8000; `make test` runs the whole suite.
VENV    ?= .venv
PYTHON  ?= python3
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-stamp
HOST    ?= 127.0.0.1
PORT    ?= 8000

# npm packages, each pinned by its own committed package-lock.json: the clients the tests drive
# and the example frontends the tests build and run
JSDIRS  := tests/js examples/ai-sdk-react examples/ag-ui-client
JSSTAMPS := $(JSDIRS:%=%/node_modules/.installed-stamp)

.PHONY: install run test lint bench system-deps js-deps clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,bedrock,otel]'
	touch $(STAMP)

run: install
	$(BIN)/agentloop serve --host $(HOST) --port $(PORT)

# redis-server, bubblewrap, chromium and node come from Debian's packages when the machine lacks them
system-deps:
	@scripts/system-deps.sh

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# the JavaScript packages, exactly as the committed lockfiles pin them
js-deps: $(JSSTAMPS)

%/node_modules/.installed-stamp: %/package.json %/package-lock.json | system-deps
	cd $* && npm ci --no-audit --no-fund --loglevel=error
	touch $@

test: install system-deps js-deps
	@scripts/test.sh

# the production-path benchmark side by side with LangGraph (minutes); BENCH_QUICK=1 for a smaller run
bench: install system-deps
	@test -x $(BIN)/py-spy || $(BIN)/pip install -q 'py-spy>=0.3'
	$(BIN)/python bench/harness.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis $(JSDIRS:%=%/node_modules)
