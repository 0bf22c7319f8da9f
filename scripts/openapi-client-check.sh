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
SERVER_PID=""
cleanup() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

"$BIN" --host 127.0.0.1 --port 0 --storage memory >"$WORK/stdout" 2>"$WORK/stderr" &
SERVER_PID=$!
PORT=""
for _ in $(seq 300); do
    line=$(head -n 1 "$WORK/stdout" 2>/dev/null || true)
    if [[ "$line" =~ ^listening\ on\ http://127\.0\.0\.1:([0-9]+)$ ]]; then
        PORT=${BASH_REMATCH[1]}
        break
    fi
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
done
if [ -z "$PORT" ]; then
    echo "openapi-client-check.sh: the server did not print 'listening on http://127.0.0.1:PORT'" >&2
    cat "$WORK/stdout" "$WORK/stderr" >&2
    exit 1
fi
BASE="http://127.0.0.1:$PORT"
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
