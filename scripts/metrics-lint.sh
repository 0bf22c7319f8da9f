#!/usr/bin/env bash
# Lints the real server's GET /metrics with Prometheus's own linter, `promtool check metrics`:
# any problem it reports (a family without help text, a counter without `_total`, ...) fails.
#
#   bash scripts/metrics-lint.sh        # after `swift build`
#
# promtool comes with Debian's `prometheus` package, installed here when missing (apt-get, through
# sudo unless root, without recommended packages; only promtool is used, the daemon is not started).
# The server is .build/debug/state-server (or $STATE_SERVER_BIN) on a free port of 127.0.0.1, with a
# SQLite database of its own so the storage families are there too; it gets some traffic first
# (a session, dispatches, a state read, a 404) so every family has samples, and is stopped at the end.
set -euo pipefail

cd "$(dirname "$0")/.."
BIN=${STATE_SERVER_BIN:-.build/debug/state-server}
if [ ! -x "$BIN" ]; then
    echo "metrics-lint.sh: $BIN not found or not executable; run 'swift build' first" >&2
    exit 2
fi

if ! command -v promtool >/dev/null 2>&1; then
    bash scripts/lib/apt-install.sh prometheus  # for promtool
fi

WORK=$(mktemp -d)
source scripts/lib/test-server.sh
cleanup() {
    stop_server
    rm -rf "$WORK"
}
trap cleanup EXIT

start_server metrics-lint.sh --storage "sqlite:$WORK/state.db"

session=$(curl -sS --fail -X POST "$BASE/v1/sessions")
id=$(printf '%s' "$session" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
token=$(printf '%s' "$session" | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
for _ in 1 2 3; do
    curl -sS --fail -o /dev/null -X POST "$BASE/v1/sessions/$id/dispatch" -H "Authorization: Bearer $token" \
        -H "Content-Type: application/json" -d '{"feature":"counter","action":{"type":"increment"}}'
done
curl -sS --fail -o /dev/null "$BASE/v1/sessions/$id/state/counter" -H "Authorization: Bearer $token"
curl -sS -o /dev/null "$BASE/no-such-route"
curl -sS --fail "$BASE/metrics" -o "$WORK/metrics.txt"

families=$(grep -c '^# TYPE ' "$WORK/metrics.txt" || true)
echo "promtool: $(promtool --version 2>&1 | head -n 1)"
status=0
problems=$(promtool check metrics <"$WORK/metrics.txt" 2>&1) || status=$?
if [ "$status" -ne 0 ] || [ -n "$problems" ]; then
    printf '%s\n' "$problems" >&2
    echo "metrics-lint.sh: FAILED: promtool check metrics reported $(printf '%s\n' "$problems" | grep -c .) problem(s) in $families families" >&2
    exit 1
fi
echo "metrics-lint.sh: promtool check metrics: clean ($families families)"
