#!/usr/bin/env bash
# The whole suite: lint, types, the import layers (lint-imports), then pytest in two processes
# (pytest-xdist; most of the suite's time is spent waiting on sockets, servers and the browser).
# Each process starts its own throw-away redis-server on a free loopback port unless
# AGENTLOOP_TEST_REDIS_URL names one (tests/support/redis_server.py); never 127.0.0.1:6379.
# Extra arguments go to pytest (`scripts/test.sh -n 0 tests/api` runs one directory in-process).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin

$BIN/ruff check .
$BIN/mypy
$BIN/lint-imports

# loadfile: a module's tests stay in one process, so its shared servers start once
$BIN/pytest -q -p no:cacheprovider -n "${AGENTLOOP_TEST_PROCESSES:-2}" --dist loadfile "$@"
