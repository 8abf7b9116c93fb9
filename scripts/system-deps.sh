#!/usr/bin/env bash
# Installs the system packages the tests need (redis-server, bubblewrap) when they are missing.
set -euo pipefail
need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
[ ${#need[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing ${need[*]} with apt-get" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
