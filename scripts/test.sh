#!/usr/bin/env bash
# The whole suite: lint, types, the import layers (lint-imports), then pytest against a throw-away redis-server on a free
# loopback port (unless AGENTLOOP_TEST_REDIS_URL names one). Never touches 127.0.0.1:6379.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin

$BIN/ruff check .
$BIN/mypy
$BIN/lint-imports

tmp=$(mktemp -d)
cleanup() {
  if [ -f "$tmp/redis.pid" ]; then kill "$(cat "$tmp/redis.pid")" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

if [ -z "${AGENTLOOP_TEST_REDIS_URL:-}" ]; then
  port=$($BIN/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no --dir "$tmp" \
    --daemonize yes --pidfile "$tmp/redis.pid" --logfile "$tmp/redis.log"
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  export AGENTLOOP_TEST_REDIS_URL="redis://127.0.0.1:$port/0"
fi

$BIN/pytest -q -p no:cacheprovider "$@"
