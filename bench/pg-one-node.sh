#!/usr/bin/env bash
# One node on PostgreSQL, A against B: POST dispatch over N sessions (wrk -t2 -c64), with the
# node's and PostgreSQL's CPU per request and pg_stat_statements' planning and execution time
# per call of the heaviest statements. Builds alternate (A B A B ...), each on a fresh database
# of the same throwaway PostgreSQL (fsync on), so the ratios come from the same minutes.
#
#   bash bench/pg-one-node.sh BIN_A BIN_B [SESSIONS] [ROUNDS]     (SESSIONS 1000, ROUNDS 2)
#
# Knobs: PG_ONE_DURATION (seconds of wrk per run, 6). Only 127.0.0.1; the PostgreSQL and the
# nodes it starts are stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
A=$(realpath "$1"); B=$(realpath "$2"); N=${3:-1000}; ROUNDS=${4:-2}; D=${PG_ONE_DURATION:-6}
command -v wrk >/dev/null || { echo "pg-one-node: wrk missing (make deps)" >&2; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/pg-one-node.XXXXXX")
chmod 755 "$W"  # PostgreSQL runs as an unprivileged user when we are root
NODE=""
cleanup() {
    [ -n "$NODE" ] && kill "$NODE" 2>/dev/null && wait "$NODE" 2>/dev/null
    bash scripts/postgres-test-server.sh destroy "$W/pg" >/dev/null 2>&1 || true
    rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
POSTGRES_SERVER_OPTIONS="-c fsync=on -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track_planning=on" \
    bash scripts/postgres-test-server.sh start "$W/pg" > /dev/null
sql() { bash scripts/postgres-test-server.sh sql "$W/pg" "$1" "$2"; }
pg_ticks() {
    local pm t=0 p; pm=$(head -1 "$W/pg/data/postmaster.pid")
    for p in $pm $(pgrep -P "$pm"); do t=$((t + $(awk '{print $14+$15+$16+$17}' /proc/$p/stat 2>/dev/null || echo 0))); done
    echo $t
}
one() {  # one LABEL BIN ROUND
    local label=$1 bin=$2 db url port t0 t1 g0 g1 rps
    db=bench_${label}_$3
    url=$(bash scripts/postgres-test-server.sh createdb "$W/pg" "$db")
    env STATE_SERVER_LOG_LEVEL=warning STATE_SERVER_CLUSTER_SECRET=bench-secret-0123456789abcdef0123 \
        STATE_SERVER_LIMITS_REQUESTS_PER_SECOND=100000000 STATE_SERVER_LIMITS_SESSIONS_PER_MINUTE=1000000 \
        STATE_SERVER_LIMITS_DISPATCHES_PER_SECOND=1000000 STATE_SERVER_LIMITS_CONNECTIONS_PER_ADDRESS=1000000 \
        "$bin" --port 0 --storage "$url?sslmode=disable" > "$W/out" 2> "$W/err" &
    NODE=$!
    port=$(wait_listening "$NODE" "$W/out" "$W/err" "$label") || exit 1
    python3 bench/tools/mksessions.py --url "http://127.0.0.1:$port" --count "$N" --out "$W/s.txt" --dispatch --timeout 180 > /dev/null
    sql "$db" "CREATE EXTENSION IF NOT EXISTS pg_stat_statements; SELECT pg_stat_statements_reset()" > /dev/null
    t0=$(awk '{print $14+$15}' "/proc/$NODE/stat"); g0=$(pg_ticks)
    wrk -t2 -c64 -d"${D}s" -s bench/wrk/sessions.lua "http://127.0.0.1:$port" -- dispatch "$W/s.txt" > "$W/wrk.txt" 2>&1
    t1=$(awk '{print $14+$15}' "/proc/$NODE/stat"); g1=$(pg_ticks)
    rps=$(awk '/Requests\/sec/ {print $2}' "$W/wrk.txt")
    grep -q "Non-2xx" "$W/wrk.txt" && echo "pg-one-node: $label: $(grep Non-2xx "$W/wrk.txt")" >&2
    python3 -c "import sys; r, d, hz = float('$rps'), $D, $(getconf CLK_TCK); print('%-2s round %s: %9.1f dispatches/s  CPU per dispatch: node %.3f ms, PostgreSQL %.3f ms' % ('$label', '$3', r, ($t1 - $t0) * 1000 / hz / (r * d), ($g1 - $g0) * 1000 / hz / (r * d)))"
    sql "$db" "SELECT '   ' || calls || ' calls, planning ' || coalesce(round((total_plan_time / nullif(plans, 0))::numeric, 3)::text, '-') || ' ms/plan (' || plans || ' plans), execution ' || round((total_exec_time / nullif(calls, 0))::numeric, 3) || ' ms/call: ' || left(regexp_replace(query, '\s+', ' ', 'g'), 50) FROM pg_stat_statements WHERE calls > 50 ORDER BY total_exec_time + total_plan_time DESC LIMIT 2"
    kill "$NODE"; wait "$NODE" 2>/dev/null || true; NODE=""
}
echo "A = $A"; echo "B = $B"; echo "$N session(s), wrk -t2 -c64 -d${D}s, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= ROUNDS; r++)); do one A "$A" "$r"; one B "$B" "$r"; done
