#!/usr/bin/env bash
# Install the system packages the test suite needs, from Debian, when they are missing.
# Idempotent and silent when everything is there already.
#   chromium: the headless browser that renders `exitpool report --html` (tests/test_report.py)
set -euo pipefail

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)

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
command -v chromium >/dev/null 2>&1 || { echo "test-deps: chromium did not install" >&2; exit 1; }
