#!/usr/bin/env bash
# Generates a typed Python client from the served OpenAPI document with openapi-python-client
# (no warnings allowed), then runs a short typed flow with it against a live server: create a
# session, dispatch, read `.version`, a 412 for a stale If-Match, a 304 for If-None-Match
# (scripts/openapi-client/flow.py).
#
#   bash scripts/openapi-client-check.sh        # after `swift build`
#
# The tools live in .cache/venv (scripts/python-env.sh). The server is .build/debug/state-server
# (or $STATE_SERVER_BIN), on a free port of 127.0.0.1, in memory; it is stopped at the end.
set -euo pipefail

cd "$(dirname "$0")/.."
BIN=${STATE_SERVER_BIN:-.build/debug/state-server}
if [ ! -x "$BIN" ]; then
    echo "openapi-client-check.sh: $BIN not found or not executable; run 'swift build' first" >&2
    exit 2
fi
PY=$(bash scripts/python-env.sh)
VENV_BIN=$(dirname "$PY")

WORK=$(mktemp -d)
source scripts/lib/test-server.sh
cleanup() {
    stop_server
    rm -rf "$WORK"
}
trap cleanup EXIT

start_server openapi-client-check.sh --storage memory
curl -sS --fail "$BASE/openapi.json" -o "$WORK/openapi.json"

# No post hooks (they would run ruff, which is not a test tool here).
echo 'post_hooks: []' >"$WORK/config.yaml"
"$VENV_BIN/openapi-python-client" --version
if ! (cd "$WORK" && "$VENV_BIN/openapi-python-client" generate --path openapi.json --config config.yaml \
    --meta none --output-path client >generate.log 2>&1); then
    cat "$WORK/generate.log" >&2
    echo "openapi-client-check.sh: FAILED: openapi-python-client could not generate a client" >&2
    exit 1
fi
if grep -qi 'warning' "$WORK/generate.log"; then
    cat "$WORK/generate.log" >&2
    echo "openapi-client-check.sh: FAILED: openapi-python-client warned about the document" >&2
    exit 1
fi
echo "generated a client from $BASE/openapi.json with no warnings"

PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$WORK" "$PY" scripts/openapi-client/flow.py "$BASE"
echo "openapi-client-check.sh: passed"
