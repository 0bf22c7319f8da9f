#!/usr/bin/env bash
# Lints every route's reply with httplint (scripts/httplint_check.py) against a live server;
# fails on any warning not explained in the script's allow-list.
#
#   scripts/httplint.sh            # after `swift build`
#
# Environment: STATE_SERVER_BIN (default .build/debug/state-server).
set -euo pipefail

cd "$(dirname "$0")/.."
BIN=${STATE_SERVER_BIN:-.build/debug/state-server}
if [ ! -x "$BIN" ]; then
    echo "httplint.sh: $BIN not found or not executable; run 'swift build' first" >&2
    exit 1
fi
PY=$(bash scripts/python-env.sh)
WORK=$(mktemp -d)
# shellcheck source=scripts/lib/test-server.sh
source scripts/lib/test-server.sh
trap 'stop_server; rm -rf "$WORK"' EXIT
start_server httplint --storage memory
"$PY" scripts/httplint_check.py "$BASE"
