#!/usr/bin/env bash
# Durable dispatch, build A against build B, alternating (A B A B ...), each run on a fresh
# server and a fresh SQLite file (persistence.sync full): wrk -t2 -c64 POST dispatch over N
# sessions, with the server's CPU per dispatch, the bytes it wrote per dispatch (/proc/PID/io
# wchar: WAL, checkpoints and sockets) and its commit and merge figures from /metrics.
#
#   bash bench/durable-ab.sh BIN_A BIN_B [SESSIONS] [ROUNDS]     (SESSIONS 1000, ROUNDS 2)
#
# Knobs: DURABLE_AB_DURATION (seconds of wrk per run, 8), DURABLE_AB_STORAGE (sqlite, or memory
# to compare the memory path). Only 127.0.0.1; every server it starts is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
A=$(realpath "$1"); B=$(realpath "$2"); N=${3:-1000}; ROUNDS=${4:-2}
D=${DURABLE_AB_DURATION:-8}; STORAGE=${DURABLE_AB_STORAGE:-sqlite}
command -v wrk >/dev/null || { echo "durable-ab: wrk missing (make deps)" >&2; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/durable-ab.XXXXXX")
SERVER=""
cleanup() {
    [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null
    rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
metric() { awk -v name="$1" '$1 == name {print $2}' "$W/metrics"; }
one() {  # one LABEL BIN ROUND
    local label=$1 bin=$2 port args=(--port 0) t0 t1 w0 w1 rps
    rm -f "$W"/b.db*
    [ "$STORAGE" = sqlite ] && args+=(--storage "sqlite:$W/b.db")
    env STATE_SERVER_LOG_LEVEL=warning STATE_SERVER_PERSISTENCE_SYNC=full STATE_SERVER_SESSIONS_MAX=200000 \
        STATE_SERVER_LIMITS_REQUESTS_PER_SECOND=100000000 STATE_SERVER_LIMITS_SESSIONS_PER_MINUTE=1000000 \
        STATE_SERVER_LIMITS_DISPATCHES_PER_SECOND=1000000 STATE_SERVER_LIMITS_CONNECTIONS_PER_ADDRESS=1000000 \
        "$bin" "${args[@]}" > "$W/out" 2> "$W/err" &
    SERVER=$!
    port=$(wait_listening "$SERVER" "$W/out" "$W/err" "$label") || exit 1
    python3 bench/tools/mksessions.py --url "http://127.0.0.1:$port" --count "$N" --out "$W/s.txt" --dispatch > /dev/null
    t0=$(awk '{print $14+$15}' "/proc/$SERVER/stat"); w0=$(awk '/^wchar/ {print $2}' "/proc/$SERVER/io")
    wrk -t2 -c64 -d"${D}s" -s bench/wrk/sessions.lua "http://127.0.0.1:$port" -- dispatch "$W/s.txt" > "$W/wrk.txt" 2>&1
    t1=$(awk '{print $14+$15}' "/proc/$SERVER/stat"); w1=$(awk '/^wchar/ {print $2}' "/proc/$SERVER/io")
    curl -s "http://127.0.0.1:$port/metrics" > "$W/metrics"
    rps=$(awk '/Requests\/sec/ {print $2}' "$W/wrk.txt")
    grep -q "Non-2xx" "$W/wrk.txt" && echo "durable-ab: $label: $(grep Non-2xx "$W/wrk.txt")" >&2
    python3 - "$label" "$3" "$rps" "$D" "$(getconf CLK_TCK)" "$((t1 - t0))" "$((w1 - w0))" \
        "$(metric stateserver_storage_commit_duration_seconds_sum)" "$(metric stateserver_storage_commit_duration_seconds_count)" \
        "$(metric stateserver_storage_commit_batches_sum)" "$(metric stateserver_storage_merge_duration_seconds_sum)" \
        "$(metric stateserver_storage_merge_duration_seconds_count)" "$(grep 'Latency ' "$W/wrk.txt" | awk '{print $2" mean, "$4" max"}')" <<'PY'
import sys
label, rnd, rps, d, hz, ticks, written, csum, ccount, batches, msum, mcount, latency = sys.argv[1:]
rps, d, hz = float(rps), float(d), float(hz)
done = rps * d
f = lambda v: float(v) if v else 0.0
line = "%-2s round %s: %9.1f dispatches/s  CPU %.1f µs and %.1f KB written per dispatch, latency %s" % (
    label, rnd, rps, int(ticks) / hz / done * 1e6, int(written) / done / 1024, latency)
if f(ccount):
    line += "; %d group commits, %.2f ms and %.1f changes each" % (f(ccount), f(csum) / f(ccount) * 1000, f(batches) / f(ccount))
if f(mcount):
    line += "; %d merge parts, %.1f ms each" % (f(mcount), f(msum) / f(mcount) * 1000)
print(line)
PY
    kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=""
}
echo "A = $A"; echo "B = $B"
echo "$STORAGE, $N session(s), wrk -t2 -c64 -d${D}s, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= ROUNDS; r++)); do one A "$A" "$r"; one B "$B" "$r"; done
