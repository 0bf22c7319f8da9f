#!/usr/bin/env bash
# Two builds of the server, measured in the same minutes: A and B run side by side (both
# started, one measured at a time), and each scenario alternates A, B, A, B… so the machine's
# drift hits both alike. Prints requests/s per run and the B/A ratio of the means.
#
#   bash bench/ab.sh BINARY_A BINARY_B          e.g. an older commit's release build and today's
#
# Scenarios (wrk -t2 -c64, keep-alive, 127.0.0.1, memory storage): GET /healthz, GET
# state/counter over 1,000 sessions, POST dispatch over 1,000 sessions, and (with AB_TODOS=1,
# the default on SQLite) POST toggle: one todo toggled in 100 sessions whose lists hold 100
# items of 200-byte titles (about 25 KB of state each). Knobs: AB_ROUNDS (runs
# of each binary per scenario, 3), AB_DURATION (seconds per run, 5), AB_STORAGE (`sqlite`: each
# binary on a fresh SQLite database of its own, fsync on: durable dispatch).
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] && [ -x "$1" ] && [ -x "$2" ] || { echo "usage: bench/ab.sh BINARY_A BINARY_B" >&2; exit 2; }
ROUNDS=${AB_ROUNDS:-3}
TODOS=${AB_TODOS:-$([ "${AB_STORAGE:-memory}" = sqlite ] && echo 1 || echo 0)}
DURATION=${AB_DURATION:-5}
command -v wrk >/dev/null || { echo "bench/ab.sh: wrk is missing (apt-get install wrk)" >&2; exit 2; }
TMP=$(mktemp -d /tmp/ab.XXXXXX)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$TMP"' EXIT

start() { # start NAME BINARY -> sets PORT_NAME
    local name=$1 binary=$2
    cp -p "$binary" "$TMP/ab-$name"
    local storage=()
    [ "${AB_STORAGE:-memory}" = sqlite ] && storage=(--storage "sqlite:$TMP/$name.db")
    # The abuse limits on, far above this load (one address standing for many clients).
    STATE_SERVER_LOG_LEVEL=warning STATE_SERVER_LIMITS_REQUESTS_PER_SECOND=100000000 STATE_SERVER_LIMITS_SESSIONS_PER_MINUTE=1000000 \
    STATE_SERVER_LIMITS_DISPATCHES_PER_SECOND=1000000 STATE_SERVER_LIMITS_CONNECTIONS_PER_ADDRESS=1000000 \
    "$TMP/ab-$name" --port 0 "${storage[@]}" > "$TMP/$name.out" 2> "$TMP/$name.err" &
    PIDS+=($!)
    for _ in $(seq 100); do grep -q listening "$TMP/$name.out" 2>/dev/null && break; sleep 0.1; done
    local port; port=$(sed -n 's/.*:\([0-9]*\)$/\1/p' "$TMP/$name.out" | head -1)
    [ -n "$port" ] || { echo "bench/ab.sh: $binary did not start: $(cat "$TMP/$name.err")" >&2; exit 1; }
    printf -v "PORT_$name" '%s' "$port"
    timeout 120 python3 bench/tools/mksessions.py --url "http://127.0.0.1:$port" --count 1000 \
        --out "$TMP/sessions-$name.txt" --dispatch > /dev/null || { echo "bench/ab.sh: creating sessions failed" >&2; exit 1; }
    if [ "$TODOS" = 1 ]; then
        timeout 300 python3 bench/tools/filltodos.py --url "http://127.0.0.1:$port" --sessions "$TMP/sessions-$name.txt" \
            --count 100 --items 100 --title-bytes 200 --out "$TMP/todos-$name.txt" || { echo "bench/ab.sh: filling todo lists failed" >&2; exit 1; }
    fi
}

start A "$1"
start B "$2"

rps() { # rps NAME SCENARIO -> requests/s of one wrk run
    local name=$1 scenario=$2 port_var="PORT_$1"
    local url="http://127.0.0.1:${!port_var}"
    case $scenario in
        healthz) wrk -t2 -c64 -d"${DURATION}s" "$url/healthz" ;;
        toggle) wrk -t2 -c64 -d"${DURATION}s" -s bench/wrk/sessions.lua "$url" -- toggle "$TMP/todos-$name.txt" ;;
        *) wrk -t2 -c64 -d"${DURATION}s" -s bench/wrk/sessions.lua "$url" -- "$scenario" "$TMP/sessions-$name.txt" ;;
    esac 2>&1 | awk '/^Requests\/sec:/ {print int($2)}'
}

echo "A: $1"
echo "B: $2"
scenarios=(healthz state dispatch)
[ "$TODOS" = 1 ] && scenarios+=(toggle)
for scenario in "${scenarios[@]}"; do
    a_runs=(); b_runs=()
    for ((round = 1; round <= ROUNDS; round++)); do
        a_runs+=("$(rps A "$scenario")")
        b_runs+=("$(rps B "$scenario")")
    done
    python3 - "$scenario" "${a_runs[*]}" "${b_runs[*]}" <<'EOF'
import sys
scenario, a, b = sys.argv[1], [int(x) for x in sys.argv[2].split()], [int(x) for x in sys.argv[3].split()]
ma, mb = sum(a) / len(a), sum(b) / len(b)
print(f"{scenario:9} A {ma:>9,.0f} req/s ({' / '.join(f'{x:,}' for x in a)})   "
      f"B {mb:>9,.0f} req/s ({' / '.join(f'{x:,}' for x in b)})   B/A {mb / ma:.2f}")
EOF
done
