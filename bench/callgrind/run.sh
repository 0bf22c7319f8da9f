#!/usr/bin/env bash
# Instructions per request, counted by valgrind's callgrind: repeatable on a shared, noisy
# machine (the count does not depend on what else runs), so it shows what a code change buys.
#
#   bash bench/callgrind/run.sh [BINARY] [REQUESTS]       one binary (default: release build)
#   bash bench/callgrind/run.sh --commits C1 C2 ...       each commit, built in a worktree
#
# Prints, per binary, instructions per request for GET /healthz, GET state/counter and POST
# dispatch (counter increment) on one keep-alive connection, minus a run with no requests.
# CG_STORAGE=sqlite runs each server on a fresh SQLite database (fsync on): durable dispatch.
set -euo pipefail
cd "$(dirname "$0")/../.."
REQUESTS=${REQUESTS:-2000}
WORK=$(mktemp -d /tmp/callgrind.XXXXXX)
trap 'rm -rf "$WORK"; git worktree prune 2>/dev/null || true' EXIT
command -v valgrind >/dev/null || { sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo; $sudo apt-get update -qq && $sudo apt-get install -y -qq valgrind; }

# instructions BINARY KIND COUNT -> total Ir of the server process
instructions() {
  local binary=$1 kind=$2 count=$3
  rm -f "$WORK"/cg.out.* "$WORK"/cg.db*
  local storage=()
  [ "${CG_STORAGE:-memory}" = sqlite ] && storage=(--storage "sqlite:$WORK/cg.db")
  # The abuse limits on (their cost is counted), far above what this load sends.
  STATE_SERVER_LOG_LEVEL=warning STATE_SERVER_HTTP_THREADS=1 STATE_SERVER_LIMITS_REQUESTS_PER_SECOND=100000000 \
    STATE_SERVER_LIMITS_SESSIONS_PER_MINUTE=1000000 STATE_SERVER_LIMITS_DISPATCHES_PER_SECOND=1000000 \
    valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.out.%p" "$binary" --port 0 "${storage[@]}" >"$WORK/out" 2>"$WORK/err" &
  local pid=$!
  for _ in $(seq 200); do grep -q listening "$WORK/out" 2>/dev/null && break; sleep 0.1; done
  local port; port=$(sed -n 's/.*:\([0-9]*\)$/\1/p' "$WORK/out" | head -1)
  timeout 300 python3 bench/callgrind/load.py "$port" "$count" "$kind" >/dev/null
  kill -INT $pid; wait $pid || true
  grep -h "^summary\|^totals" "$WORK"/cg.out.* | head -1 | awk '{print $2}'
}

measure() {
  local binary=$1 label=$2
  # valgrind cannot read the debug info of the static release binary: count a stripped copy.
  strip --strip-debug -o "$WORK/server" "$binary"
  local base; base=$(instructions "$WORK/server" healthz 0)
  local line="$label"
  for kind in healthz state dispatch; do
    local total; total=$(instructions "$WORK/server" $kind "$REQUESTS")
    line="$line | $kind $(( (total - base) / REQUESTS ))"
  done
  echo "$line"
}

if [ "${1:-}" = "--commits" ]; then
  shift
  for commit in "$@"; do
    git worktree add -q --detach "$WORK/tree" "$commit"
    (cd "$WORK/tree" && swift build -c release --product state-server --static-swift-stdlib --scratch-path "$WORK/build" >/dev/null 2>&1) \
      && measure "$WORK/build/release/state-server" "$commit $(git log -1 --format=%s "$commit" | cut -c1-50)" \
      || echo "$commit: build failed"
    git worktree remove --force "$WORK/tree"
  done
else
  binary=${1:-.build/release/state-server}
  REQUESTS=${2:-$REQUESTS}
  [ -x "$binary" ] || swift build -c release --product state-server --static-swift-stdlib
  measure "$binary" "$binary"
fi
