#!/usr/bin/env bash
# Install the system packages the test suite needs, from Debian, when they are missing.
# Idempotent and silent when everything is there already.
#   chromium: the headless browser that renders `exitpool report --html` (tests/test_report.py)
#   redis-server: the shared store of fleet mode (tests/test_fleet.py starts its own servers;
#     tests/test_store_ha.py starts Sentinels with `redis-server FILE --sentinel` and a cluster)
#   redis-tools: redis-cli, with which the tests drive those servers (failovers, slots)
set -euo pipefail

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        sudo="sudo"
    else
        echo "test-deps: need root (or sudo) to install: ${missing[*]}" >&2
        exit 1
    fi
fi

echo "test-deps: installing ${missing[*]} from Debian" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
for c in chromium redis-server redis-cli redis-benchmark; do
    command -v "$c" >/dev/null 2>&1 || { echo "test-deps: $c did not install" >&2; exit 1; }
done
