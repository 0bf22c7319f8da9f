#!/usr/bin/env bash
# StateServer benchmark suite — `make bench` builds the release binary, then runs this.
#
#   bash bench/run.sh            (builds .build/release/state-server first if it is missing)
#
# Everything runs on 127.0.0.1 only, every step is bounded in time, and every process this
# script starts is stopped on exit, failure or Ctrl-C. Raw outputs stay in a temp dir
# (printed at the end); bench/report.py prints the table and writes docs/PERFORMANCE.md.
#
# Knobs (environment): BENCH_DURATION (wrk seconds, default 8), BENCH_ROUNDS (wrk runs of each
# main scenario, interleaved with nginx, default 2), BENCH_RATE_DURATION (seconds of each
# constant-rate run after 1 s of warm-up, default 5), BENCH_RATE (constant-rate
# requests/s, default 1000), BENCH_BUDGET (seconds before the watchdog stops the run, 1200),
# BENCH_DOC (default docs/PERFORMANCE.md; empty = do not write it), BENCH_BIN (the server binary,
# default .build/release/state-server), BENCH_PHASES (which groups to
# run, default all: "http sse idle scale durable postgres peer"; the nginx baseline always runs;
# with only some phases, BENCH_DOC gets only the several-node section if postgres is one of
# them, and is left alone otherwise: see bench/report.py),
# BENCH_NODE_CPU (the postgres phase: each node's CPU quota in CPUs through a cgroup v1 `cpu`
# group of its own, default 0.10; 0 = no quota), BENCH_NCHAN_WORKERS (the sse phase: Nchan's
# worker processes beside the server and the floor, default 2: see bench/README.md).
#
#   make bench-cluster = BENCH_PHASES=postgres bash bench/run.sh (the several-node section only)

set -uo pipefail
exec 3>&1 4>&2  # the terminal, for messages from traps (which may run inside a redirected step)
cd "$(dirname "$0")/.."
ROOT=$PWD
T_START=$(date +%s)

DURATION=${BENCH_DURATION:-8}
ROUNDS=${BENCH_ROUNDS:-2}
RATE=${BENCH_RATE:-1000}
RATE_DURATION=${BENCH_RATE_DURATION:-5}
BUDGET=${BENCH_BUDGET:-1200}
DOC=${BENCH_DOC-docs/PERFORMANCE.md}
PHASES=${BENCH_PHASES:-http sse idle scale durable postgres peer}
want() { [[ " $PHASES " == *" $1 "* ]]; }
WRK_ARGS=(-t2 -c64 "-d${DURATION}s" --latency)
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo

log() { printf '\n== %s  [%ss]\n' "$*" "$(( $(date +%s) - T_START ))"; }
warn() { printf 'bench: WARNING: %s\n' "$*" >&2; echo "$*" >> "${TMP:-/tmp}/warnings.txt"; }

# ---------------------------------------------------------------------------------------------
# Tools: wrk and nginx from Debian, the Python peer's packages from PyPI.
log "checking tools"
apt_missing=()
command -v wrk >/dev/null || apt_missing+=(wrk)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || apt_missing+=(nginx-light)
command -v python3 >/dev/null || apt_missing+=(python3 python3-venv python3-pip)
command -v curl >/dev/null || apt_missing+=(curl)
if [ ${#apt_missing[@]} -gt 0 ]; then
    echo "installing: ${apt_missing[*]}"
    $SUDO apt-get update -qq
    if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${apt_missing[@]}"; then
        # nginx-light is not in every release; plain nginx is.
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
            "${apt_missing[@]/nginx-light/nginx}" || { echo "bench: cannot install ${apt_missing[*]}" >&2; exit 1; }
    fi
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
# Nchan beside the server in the fan-out test (issue 28): Debian's module for that nginx.
NCHAN_MODULE=/usr/lib/nginx/modules/ngx_nchan_module.so
if want sse && [ ! -f "$NCHAN_MODULE" ]; then
    echo "installing: libnginx-mod-nchan"
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libnginx-mod-nchan; } \
        || echo "bench: WARNING: cannot install libnginx-mod-nchan: the fan-out runs without Nchan" >&2
fi
# The fan-out floor (bench/tools/floor.c) and pgbench need a C compiler and PostgreSQL's client.
CC=$(command -v cc || command -v gcc || true)
if want sse && [ -z "$CC" ]; then
    echo "installing: gcc"
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq gcc libc6-dev; } \
        || echo "bench: WARNING: cannot install gcc: the fan-out runs without the floor" >&2
    CC=$(command -v cc || command -v gcc || true)
fi

PY=python3
PEER_MODULES="import fastapi, uvicorn, sse_starlette, uvloop, httptools"
if ! $PY -c "$PEER_MODULES" 2>/dev/null; then
    echo "installing the Python peer's packages (fastapi, uvicorn[standard], sse-starlette)"
    if ! $PY -m pip install -q fastapi 'uvicorn[standard]' sse-starlette 2>/dev/null; then
        # Debian's own python3 refuses pip installs (PEP 668): use a venv kept in the cache.
        VENV=${XDG_CACHE_HOME:-$HOME/.cache}/state-server-bench/venv
        if [ ! -x "$VENV/bin/python" ]; then
            $PY -m venv "$VENV" 2>/dev/null || {
                $SUDO apt-get update -qq
                DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv
                $PY -m venv "$VENV"
            }
        fi
        "$VENV/bin/python" -m pip install -q fastapi 'uvicorn[standard]' sse-starlette || exit 1
        PY=$VENV/bin/python
    fi
fi
$PY -c "$PEER_MODULES" || { echo "bench: the peer's Python packages are missing" >&2; exit 1; }

# BENCH_BIN: another build of the server to measure (e.g. an older commit's, to compare ratios).
SOURCE_BIN=${BENCH_BIN:-.build/release/state-server}
if [ ! -x "$SOURCE_BIN" ]; then
    [ -z "${BENCH_BIN:-}" ] || { echo "bench: BENCH_BIN=$BENCH_BIN is not an executable" >&2; exit 1; }
    log "building the release binary"
    swift build -c release --product state-server --static-swift-stdlib || exit 1
fi

# ---------------------------------------------------------------------------------------------
# Temp dir, process bookkeeping, cleanup, watchdog.
TMP=$(mktemp -d /tmp/sbench.XXXXXX)
RAW=$TMP/raw
RES=$TMP/results.jsonl
mkdir -p "$RAW" "$TMP/bin"
: > "$RES"
: > "$TMP/commands.txt"
PIDS=()
WATCHDOG=""
CHILD=""
PG_DIR=""
NODE_CGROUPS=()  # cgroup folders this run made (removed on exit)

# shellcheck source=bench/lib.sh
source bench/lib.sh  # stop_pid

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    [ -n "$CHILD" ] && stop_pid "$CHILD" 5
    for pid in "${PIDS[@]}"; do stop_pid "$pid" 5; done
    for cg in "${NODE_CGROUPS[@]}"; do remove_cgroup "$cg"; done
    [ -n "$PG_DIR" ] && [ -d "$PG_DIR" ] && bash scripts/postgres-test-server.sh destroy "$PG_DIR" >/dev/null 2>&1
    [ -n "$WATCHDOG" ] && kill "$WATCHDOG" 2>/dev/null
    wait 2>/dev/null
    echo "bench: raw outputs in $TMP" >&3
    exit $rc
}
# Removes a cgroup folder this run made: whatever is still in it (a process that outlived its
# stop) goes back to the root group first, since a group with members cannot be removed.
remove_cgroup() {
    local cg=$1 p k
    [ -d "$cg" ] || return 0
    for ((k = 0; k < 20; k++)); do
        for p in $(cat "$cg/cgroup.procs" 2>/dev/null); do echo "$p" > "$(dirname "$cg")/cgroup.procs" 2>/dev/null; done
        rmdir "$cg" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "bench: could not remove the cgroup $cg" >&4
}
trap cleanup EXIT
trap 'echo "bench: interrupted, stopping everything it started" >&4; exit 130' INT TERM

# The watchdog ends a run that overruns its budget (every step also has its own timeout).
(
    trap 'kill "$sp" 2>/dev/null; exit 0' TERM
    sleep "$BUDGET" & sp=$!
    wait "$sp" && { echo "bench: time budget of ${BUDGET}s used up, stopping" >&4; kill -TERM $$; }
) &
WATCHDOG=$!

# Event streams and 100,000-session clients need many descriptors (the server raises its own
# soft limit to the hard one too).
NOFILE=$(ulimit -Hn)
[ "$NOFILE" = unlimited ] && NOFILE=1048576
ulimit -n "$NOFILE" 2>/dev/null || true
NOFILE=$(ulimit -n)
CONN_LIMIT=$(( NOFILE - 1000 < 19000 ? NOFILE - 1000 : 19000 ))
IDLE_STREAMS=$(( CONN_LIMIT - 500 < 10000 ? CONN_LIMIT - 500 : 10000 ))
BIG_FANOUT=$IDLE_STREAMS
echo "open files: $NOFILE, server connection limit: $CONN_LIMIT, idle streams: $IDLE_STREAMS"

# Runs a step in the background and waits for it: a trapped signal (Ctrl-C, the watchdog)
# interrupts `wait` at once, while a foreground child would delay the trap until it ended.
bg() {
    "$@" &
    CHILD=$!
    wait "$CHILD"
    local rc=$?
    CHILD=""
    return $rc
}

free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# A command line as docs/PERFORMANCE.md shows it: temp paths as $TMP, ports and pids by name.
NGINX_PORT=""; PEER_PORT=""; PEER_PID=""; NODE_PORTS=(); CLUSTER_URL=""
shown() {
    local sub="s#$TMP#\$TMP#g; s#$ROOT/##g; s#timeout [0-9]* ##; s# --results [^ ]*##; s#$PY #python3 #"
    [ -n "${SERVER_PORT:-}" ] && sub="$sub; s#:$SERVER_PORT\b#:\$SERVER_PORT#g"
    [ -n "${SERVER_PID:-}" ] && sub="$sub; s#--pid $SERVER_PID\b#--pid \$SERVER_PID#g"
    [ -n "$NGINX_PORT" ] && sub="$sub; s#:$NGINX_PORT\b#:\$NGINX_PORT#g"
    [ -n "$PEER_PORT" ] && sub="$sub; s#:$PEER_PORT\b#:\$PEER_PORT#g; s#--port $PEER_PORT\b#--port \$PEER_PORT#g"
    [ -n "$PEER_PID" ] && sub="$sub; s#--pid $PEER_PID\b#--pid \$PEER_PID#g"
    local i
    for i in "${!NODE_PORTS[@]}"; do sub="$sub; s#:${NODE_PORTS[$i]}\b#:\$NODE$((i + 1))_PORT#g"; done
    [ -n "${CLUSTER_URL:-}" ] && sub="$sub; s#${CLUSTER_URL}\b#http://127.0.0.1:\$CLUSTER_NGINX_PORT#g"
    [ -n "${MEM_PORT:-}" ] && sub="$sub; s#:$MEM_PORT\b#:\$MEM_PORT#g; s#--pid $MEM_PID\b#--pid \$MEM_PID#g"
    [ -n "${FLOOR_PORT:-}" ] && sub="$sub; s#:$FLOOR_PORT\b#:\$FLOOR_PORT#g"
    [ -n "${FLOOR_PID:-}" ] && sub="$sub; s#--pid $FLOOR_PID\b#--pid \$FLOOR_PID#g"
    [ -n "${NCHAN_PORT:-}" ] && sub="$sub; s#:$NCHAN_PORT\b#:\$NCHAN_PORT#g"
    [ -n "${NCHAN_PIDS:-}" ] && sub="$sub; s#--pid $NCHAN_PIDS\b#--pid \$NCHAN_PIDS#g"
    echo "$*" | sed "$sub"
}

# Records a command for docs/PERFORMANCE.md and runs it.
run() {
    shown "$*" >> "$TMP/commands.txt"
    bg "$@"
}

# The server runs as a copy named ssbench: on a shared machine, other work that stops
# "state-server" processes by name must not hit the bench's server mid-run.
cp -p "$SOURCE_BIN" "$TMP/bin/ssbench"
SERVER_BIN=$TMP/bin/ssbench
SERVER_ENV=(
    STATE_SERVER_LOG_LEVEL=warning
    STATE_SERVER_STREAMS_TOTAL=$CONN_LIMIT
    STATE_SERVER_STREAMS_PER_SESSION=$CONN_LIMIT
    STATE_SERVER_HTTP_CONNECTION_LIMIT=$CONN_LIMIT
    STATE_SERVER_SESSIONS_MAX=200000
    # The abuse limits stay on, far above what the load generators (one address standing for
    # thousands of clients) send: the numbers include what the limits cost, never a 429.
    STATE_SERVER_LIMITS_REQUESTS_PER_SECOND=100000000
    STATE_SERVER_LIMITS_SESSIONS_PER_MINUTE=1000000
    STATE_SERVER_LIMITS_DISPATCHES_PER_SECOND=1000000
    STATE_SERVER_LIMITS_CONNECTIONS_PER_ADDRESS=1000000
    # The nodes of the several-node runs sign forwarded requests with it (required on PostgreSQL).
    STATE_SERVER_CLUSTER_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
)
# SERVER_ENV as the commands file shows it: the secret as ***.
SERVER_ENV_SHOWN="${SERVER_ENV[*]/#STATE_SERVER_CLUSTER_SECRET=*/STATE_SERVER_CLUSTER_SECRET=***}"
SERVER_PID=""
SERVER_PORT=""
SERVER_NAME=""

start_server() {  # start_server NAME [extra flags...]
    SERVER_NAME=$1; shift
    local out=$RAW/server-$SERVER_NAME.out err=$RAW/server-$SERVER_NAME.err i
    # START_ENV: one more VAR=value for this server (the durable one's sync mode).
    shown "env $SERVER_ENV_SHOWN ${START_ENV:+$START_ENV }.build/release/state-server --port 0 $*   # -> \$SERVER_PORT, \$SERVER_PID" \
        >> "$TMP/commands.txt"
    env "${SERVER_ENV[@]}" ${START_ENV:+"$START_ENV"} "$SERVER_BIN" --port 0 "$@" > "$out" 2> "$err" &
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
    SERVER_PORT=""
    for ((i = 0; i < 100; i++)); do
        SERVER_PORT=$(sed -n 's#^listening on http://127\.0\.0\.1:\([0-9]*\).*#\1#p' "$out" 2>/dev/null | head -1)
        [ -n "$SERVER_PORT" ] && break
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$SERVER_PORT" ]; then
        warn "server '$SERVER_NAME' did not start: $(tail -3 "$err")"
        return 1
    fi
    echo "server '$SERVER_NAME' pid $SERVER_PID on port $SERVER_PORT"
}

# Stops the current server; records whether it was still alive (a crash shows up here).
stop_server() {
    local status alive=1
    kill -0 "$SERVER_PID" 2>/dev/null || alive=0
    if [ $alive = 1 ]; then
        curl -s -m 5 "http://127.0.0.1:$SERVER_PORT/metrics" > "$RAW/metrics-$SERVER_NAME.txt" || true
        stop_pid "$SERVER_PID" 10
    fi
    wait "$SERVER_PID" 2>/dev/null
    status=$?
    if [ $alive = 0 ]; then
        warn "server '$SERVER_NAME' exited on its own during the phase (exit status $status; 0 means a SIGTERM/SIGINT from outside, >128 a signal such as 139 = SIGSEGV, 134 = abort). stderr tail: $(tail -5 "$RAW/server-$SERVER_NAME.err" | tr '\n' ' ')"
    fi
    $PY bench/tools/event.py "$RES" "$SERVER_NAME" "$alive" "$status" \
        "$RAW/server-$SERVER_NAME.err" > /dev/null 2>&1 || true
}

# wrk_run SCENARIO TARGET URL [-- script args...]
# Uses PHASE and ROUND (the record's name is PHASE-SCENARIO-rROUND), WRK_SCRIPT, WRK_SESSIONS, WRK_PID.
# Each phase runs its scenarios in ROUNDS interleaved with nginx, and report.py compares every
# scenario with the nginx runs of its own phase: on a shared machine the capacity drifts within
# minutes, and interleaving spreads that drift over both sides of each ratio.
PHASE=""
ROUND=1
# CPU seconds of this shell's children that ended and were waited for (bash's `times`, which must
# run in this shell, not in a $(...)): around one wait, the CPU of what was waited for (wrk).
CHILDREN_CPU=0
WRK_CPU_S=0
children_cpu() {
    times > "$TMP/times.txt"
    CHILDREN_CPU=$(sed -n 2p "$TMP/times.txt" | awk '{ split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%.3f", u[1] * 60 + u[2] + s[1] * 60 + s[2] }')
}
wrk_run() {
    local scenario=$1 target=$2 url=$3; shift 3
    local name=$PHASE-$scenario-r$ROUND
    local out=$RAW/wrk-$name.txt
    local cmd=(wrk "${WRK_ARGS[@]}" -s "${WRK_SCRIPT:-bench/wrk/report.lua}" "$url" "$@")
    echo "\$ ${cmd[*]}" > "$out"
    shown "${cmd[*]}" >> "$TMP/commands.txt"
    children_cpu; local cpu0=$CHILDREN_CPU
    bg timeout $((DURATION + 30)) "${cmd[@]}" >> "$out" 2>&1 || echo "wrk exited with status $?" >> "$out"
    children_cpu; WRK_CPU_S=$(awk -v a="$cpu0" -v b="$CHILDREN_CPU" 'BEGIN { printf "%.3f", b - a }')
    [ -z "${WRK_AFTER:-}" ] || "$WRK_AFTER"
    $PY bench/tools/wrkrecord.py --name "$name" --scenario "$scenario" --phase "$PHASE" --round "$ROUND" \
        --target "$target" --raw "$out" --results "$RES" ${WRK_PID:+--pid "$WRK_PID"} ${WRK_SESSIONS:+--sessions "$WRK_SESSIONS"} \
        | $PY -c 'import json,sys; r=json.loads(sys.stdin.read()); print("   %-22s %10s req/s  p99 %8s us  non2xx %s  errors %s" % (r["name"], r.get("rps"), r.get("p99_us"), r.get("non2xx"), sum(r.get(k,0) for k in ("connect_errors","read_errors","write_errors","timeouts"))))'
}

mksessions() {  # mksessions URL COUNT FILE NAME [--pid PID]
    local url=$1 count=$2 file=$3 name=$4; shift 4
    run timeout 200 $PY bench/tools/mksessions.py --url "$url" --count "$count" --out "$file" \
        --dispatch --name "$name" --results "$RES" --timeout 180 "$@" > "$RAW/mksessions-$name.txt" 2>&1 \
        || { warn "creating $count sessions ($name) failed: $(tail -c 400 "$RAW/mksessions-$name.txt")"; return 1; }
    tail -1 "$RAW/mksessions-$name.txt" | cut -c1-200
}

rate_run() {  # rate_run NAME TARGET URL args...
    local name=$1 target=$2 url=$3; shift 3
    run timeout 60 $PY bench/tools/rate.py --url "$url" --rate "$RATE" --duration "$RATE_DURATION" \
        --name "$name" --results "$RES" "$@" > "$RAW/rate-$name.txt" 2>&1 \
        || warn "constant-rate run $name reported errors: $(tail -c 300 "$RAW/rate-$name.txt")"
    $PY - "$target" "$RES" "$name" <<'EOF'
import json, sys
target, res, name = sys.argv[1:]
lines = [json.loads(l) for l in open(res)]
rec = [r for r in lines if r.get("name") == name and r["kind"] == "rate"][-1]
rec["target"] = target
open(res, "w").write("".join(json.dumps(r, sort_keys=True) + "\n" for r in lines))
print("   %-22s at %s/s  p50 %s us  p99 %s us  (service p99 %s us, generator lag p99 %s us)" % (
    name, rec["target_rps"], rec["p50_us"], rec["p99_us"], rec["service_p99_us"], rec["send_lag_p99_us"]))
EOF
}

sse_run() {  # sse_run NAME URL SESSIONS_FILE args...
    local name=$1 url=$2 file=$3; shift 3
    run timeout 200 $PY bench/tools/sse.py --url "$url" --sessions "$file" --name "$name" \
        --results "$RES" --timeout 150 "$@" > "$RAW/sse-$name.txt" 2>&1 \
        || warn "SSE run $name reported errors: $(tail -c 400 "$RAW/sse-$name.txt")"
    tail -1 "$RAW/sse-$name.txt" | $PY -c 'import json,sys
try:
    r = json.loads(sys.stdin.read())
except ValueError:
    sys.exit(0)
keys = ("streams_ready", "p50_ms", "p99_ms", "max_ms", "client_cpu_ms_per_round", "server_cpu_ms_per_round", "rss_after_kib", "bytes_per_stream", "idle_cpu_percent", "error_count")
print("   %-22s " % r["name"] + "  ".join("%s=%s" % (k, r[k]) for k in keys if k in r))'
}

# The fan-out floor and Nchan (the sse phase).
FLOOR_PID=""; FLOOR_PORT=""
NCHAN_PID=""; NCHAN_PORT=""; NCHAN_PIDS=""; NCHAN_WORKER_PIDS=()
NCHAN_WORKERS=${BENCH_NCHAN_WORKERS:-2}
start_floor() {
    local out=$RAW/floor.out i
    echo "\$TMP/bin/floor 0   # -> \$FLOOR_PORT, \$FLOOR_PID" >> "$TMP/commands.txt"
    "$FLOOR_BIN" 0 > "$out" 2> "$RAW/floor.err" &
    FLOOR_PID=$!
    PIDS+=("$FLOOR_PID")
    FLOOR_PORT=""
    for ((i = 0; i < 50; i++)); do
        FLOOR_PORT=$(sed -n 's#^listening on http://127\.0\.0\.1:\([0-9]*\).*#\1#p' "$out" 2>/dev/null | tail -1)
        [ -n "$FLOOR_PORT" ] && break
        sleep 0.1
    done
    [ -n "$FLOOR_PORT" ] || { warn "the floor did not start: $(tail -3 "$RAW/floor.err")"; return 1; }
    echo "floor pid $FLOOR_PID on port $FLOOR_PORT"
}
start_nchan() {
    local dir=$TMP/nchan i
    NCHAN_PORT=$(free_port)
    mkdir -p "$dir"
    # Connections per worker: every stream may land on one worker, plus the client's others.
    sed -e "s#@DIR@#$dir#g" -e "s#@PORT@#$NCHAN_PORT#g" -e "s#@WORKERS@#$NCHAN_WORKERS#g" \
        -e "s#@NOFILE@#$NOFILE#g" -e "s#@CONNECTIONS@#$((BIG_FANOUT + 1000))#g" \
        bench/nginx/nchan.conf.in > "$dir/nginx.conf"
    echo "nginx -c \$TMP/nchan/nginx.conf -p \$TMP/nchan   # from bench/nginx/nchan.conf.in, $NCHAN_WORKERS worker(s) -> \$NCHAN_PORT" >> "$TMP/commands.txt"
    "$NGINX" -c "$dir/nginx.conf" -p "$dir" -e "$dir/error.log" 2> "$RAW/nchan.err" &
    NCHAN_PID=$!
    PIDS+=("$NCHAN_PID")
    for ((i = 0; i < 50; i++)); do
        curl -sf -m 2 "http://127.0.0.1:$NCHAN_PORT/healthz" >/dev/null && break
        sleep 0.1
    done
    if ! curl -sf -m 2 "http://127.0.0.1:$NCHAN_PORT/healthz" >/dev/null; then
        warn "Nchan did not start: $(tail -3 "$RAW/nchan.err") $(tail -3 "$dir/error.log" 2>/dev/null)"
        stop_nchan
        return 1
    fi
    # CPU and RSS of the master and its workers (sse.py adds them up).
    NCHAN_WORKER_PIDS=($(pgrep -P "$NCHAN_PID"))
    PIDS+=("${NCHAN_WORKER_PIDS[@]}")  # cleanup() stops them too, should the master not
    NCHAN_PIDS=$(echo "$NCHAN_PID" "${NCHAN_WORKER_PIDS[@]}" | tr ' ' ',')
    echo "nchan pids $NCHAN_PIDS on port $NCHAN_PORT"
}
stop_nchan() {
    local p
    [ -n "$NCHAN_PID" ] && stop_pid "$NCHAN_PID" 5
    for p in "${NCHAN_WORKER_PIDS[@]}"; do stop_pid "$p" 2; done
    NCHAN_PID=""; NCHAN_WORKER_PIDS=()
    # The shared memory and its workers go with the master; nothing of it is left.
    [ -s "$TMP/nchan/error.log" ] && cp "$TMP/nchan/error.log" "$RAW/nchan-error-$(date +%s).log"
    : > "$TMP/nchan/error.log" 2>/dev/null || true
}

# ---------------------------------------------------------------------------------------------
log "machine"
{
    echo "start: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "loadavg at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "cores: $(nproc)"
    echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(git status --porcelain -- Sources Package.swift Package.resolved 2>/dev/null | wc -l) uncommitted file(s) under Sources/ and Package.*"
    echo "binary: $SOURCE_BIN built $(date -u -d "@$(stat -c %Y "$SERVER_BIN")" '+%Y-%m-%d %H:%M:%S UTC'), sha256 $(sha256sum "$SERVER_BIN" | cut -c1-12)"
} > "$TMP/run-info.txt"
cat "$TMP/run-info.txt"

# ---------------------------------------------------------------------------------------------
log "nginx baseline (static JSON, 2 workers)"
NGINX_PORT=$(free_port)
mkdir -p "$TMP/nginx"
sed -e "s#@DIR@#$TMP/nginx#g" -e "s#@PORT@#$NGINX_PORT#g" bench/nginx/nginx.conf.in > "$TMP/nginx/nginx.conf"
echo "nginx -c \$TMP/nginx/nginx.conf -p \$TMP/nginx   # from bench/nginx/nginx.conf.in" >> "$TMP/commands.txt"
"$NGINX" -c "$TMP/nginx/nginx.conf" -p "$TMP/nginx" -e "$TMP/nginx/nginx-error.log" 2> "$RAW/nginx.err" &
NGINX_PID=$!
PIDS+=("$NGINX_PID")
for ((i = 0; i < 50; i++)); do
    curl -sf -m 2 "http://127.0.0.1:$NGINX_PORT/state.json" >/dev/null && break
    sleep 0.1
done
curl -sf -m 2 "http://127.0.0.1:$NGINX_PORT/state.json" >/dev/null || { echo "bench: nginx did not start: $(cat "$RAW/nginx.err")" >&2; exit 1; }
NGINX_URL=http://127.0.0.1:$NGINX_PORT/state.json

# ---------------------------------------------------------------------------------------------
if want http; then
log "HTTP throughput: nginx, /healthz, GET state, dispatch (wrk ${WRK_ARGS[*]})"
start_server http || exit 1
URL=http://127.0.0.1:$SERVER_PORT
S1K=$TMP/sessions-1000.txt
mksessions "$URL" 1000 "$S1K" http-1000 --pid "$SERVER_PID"
head -1 "$S1K" > "$TMP/sessions-hot.txt"
PHASE=http
for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
    wrk_run nginx nginx "$NGINX_URL"
    WRK_PID=$SERVER_PID
    wrk_run healthz server "$URL/healthz"
    WRK_SCRIPT=bench/wrk/sessions.lua
    wrk_run state-1000 server "$URL" -- state "$S1K"
    wrk_run dispatch-1000 server "$URL" -- dispatch "$S1K"
    wrk_run dispatch-hot server "$URL" -- dispatch "$TMP/sessions-hot.txt"
    WRK_SCRIPT=""
    WRK_PID=""
done
ROUND=1

log "latency at a constant ${RATE} requests/s (bench/tools/rate.py, 16 connections)"
rate_run rate-nginx nginx "$NGINX_URL" --mode path --path /state.json
rate_run rate-state server "$URL" --mode state --sessions "$S1K"
rate_run rate-dispatch server "$URL" --mode dispatch --sessions "$S1K"
stop_server
fi  # http

# ---------------------------------------------------------------------------------------------
if want sse; then
log "SSE fan-out (one fresh server; each test on its own sessions)"
start_server sse || exit 1
URL=http://127.0.0.1:$SERVER_PORT
SSE_S=$TMP/sessions-sse.txt
mksessions "$URL" 1000 "$SSE_S" sse-1000
# Session k of the file for test k, so streams left from one test (closed by the client, noticed
# by the server at the next write or heartbeat) are on sessions the next test does not touch.
pick() { sed -n "$1p" "$SSE_S" > "$TMP/sse-$2.txt"; echo "$TMP/sse-$2.txt"; }
sse_run fanout-1x1000 "$URL" "$(pick 1 a)" --n-sessions 1 --subs 1000 --rounds 50 --pid "$SERVER_PID" --rss
sse_run fanout-100x10 "$URL" "$(pick 2,101 b)" --n-sessions 100 --subs 10 --rounds 50 --pid "$SERVER_PID"
sse_run fanout-1x10 "$URL" "$(pick 102 c)" --n-sessions 1 --subs 10 --rounds 50 --pid "$SERVER_PID"
sse_run fanout-1x100 "$URL" "$(pick 103 d)" --n-sessions 1 --subs 100 --rounds 50 --pid "$SERVER_PID"
stop_server
# The largest fan-out (issue 28, item 3): the server, the floor (bench/tools/floor.c: one epoll
# loop writing the same bytes, one write() per stream) and Nchan (bench/nginx/nchan.conf.in),
# BIG_FANOUT subscribers on one session each, the same client (sse.py), the same 20 rounds, in
# BENCH_ROUNDS repetitions interleaved (server, floor, Nchan; then the other way round), each on a
# fresh process: the earlier tests' closed streams would still hold descriptors (the server
# notices a closed stream at its next write or heartbeat). CPU per delivery = the process's CPU
# per round (/proc) / subscribers.
log "fan-out at $BIG_FANOUT subscribers: the server, the floor and Nchan ($NCHAN_WORKERS worker(s)), $ROUNDS repetition(s) interleaved"
FLOOR_BIN=""
if [ -n "$CC" ]; then
    echo "$CC -O2 -o \$TMP/bin/floor bench/tools/floor.c" >> "$TMP/commands.txt"
    "$CC" -O2 -o "$TMP/bin/floor" bench/tools/floor.c 2> "$RAW/floor-cc.err" && FLOOR_BIN=$TMP/bin/floor \
        || warn "bench/tools/floor.c did not compile: $(tail -3 "$RAW/floor-cc.err")"
fi
[ -f "$NCHAN_MODULE" ] || warn "no Nchan ($NCHAN_MODULE missing): the fan-out runs without it"
# Sessions of the floor and Nchan: any id names one (a fresh one per repetition).
big_fanout() {  # big_fanout WHICH SUFFIX
    local which=$1 sfx=$2 name file
    case $which in
    server)
        start_server "sse-big$sfx" || return 1
        URL=http://127.0.0.1:$SERVER_PORT
        mksessions "$URL" 1 "$TMP/sessions-big$sfx.txt" "sse-big$sfx"
        sse_run "fanout-1x$BIG_FANOUT$sfx" "$URL" "$TMP/sessions-big$sfx.txt" --n-sessions 1 --subs "$BIG_FANOUT" \
            --rounds 20 --pid "$SERVER_PID" --rss --target server
        stop_server ;;
    floor)
        [ -n "$FLOOR_BIN" ] || return 0
        start_floor || return 1
        file=$TMP/sessions-floor$sfx.txt
        echo "floor$sfx-session floor-token" > "$file"
        sse_run "floor-1x$BIG_FANOUT$sfx" "http://127.0.0.1:$FLOOR_PORT" "$file" --n-sessions 1 --subs "$BIG_FANOUT" \
            --rounds 20 --pid "$FLOOR_PID" --rss --target floor
        stop_pid "$FLOOR_PID" 5; FLOOR_PID="" ;;
    nchan)
        [ -f "$NCHAN_MODULE" ] || return 0
        start_nchan || return 1
        file=$TMP/sessions-nchan$sfx.txt
        echo "nchan$sfx-session nchan-token" > "$file"
        sse_run "nchan-1x$BIG_FANOUT$sfx" "http://127.0.0.1:$NCHAN_PORT" "$file" --n-sessions 1 --subs "$BIG_FANOUT" \
            --rounds 20 --pid "$NCHAN_PIDS" --rss --target nchan --ready head --publish-event
        stop_nchan ;;
    esac
}
for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
    sfx=""; [ "$ROUND" = 1 ] || sfx=-r$ROUND
    order="server floor nchan"; [ $((ROUND % 2)) = 0 ] && order="nchan floor server"
    for which in $order; do big_fanout "$which" "$sfx"; done
done
ROUND=1
fi  # sse

# ---------------------------------------------------------------------------------------------
if want idle; then
log "$IDLE_STREAMS idle event streams (1,000 sessions x $((IDLE_STREAMS / 1000)))"
start_server idle || exit 1
URL=http://127.0.0.1:$SERVER_PORT
mksessions "$URL" 1000 "$TMP/sessions-idle.txt" idle-1000
sse_run "idle-$IDLE_STREAMS" "$URL" "$TMP/sessions-idle.txt" --n-sessions 1000 \
    --subs $((IDLE_STREAMS / 1000)) --hold 5 --pid "$SERVER_PID" --rss
stop_server
fi  # idle

# ---------------------------------------------------------------------------------------------
if want scale; then
log "cost as work grows: sessions 100 -> 100,000 (a fresh server each; RSS, then wrk dispatch)"
PHASE=scale
wrk_run nginx nginx "$NGINX_URL"
for N in 100 1000 10000 100000; do
    start_server "scale-$N" || continue
    URL=http://127.0.0.1:$SERVER_PORT
    curl -s -m 2 "$URL/healthz" >/dev/null
    mksessions "$URL" "$N" "$TMP/sessions-scale-$N.txt" "sessions-$N" --pid "$SERVER_PID" --conns 32 --depth 8
    WRK_SCRIPT=bench/wrk/sessions.lua WRK_PID=$SERVER_PID WRK_SESSIONS=$N \
        wrk_run "scale-dispatch-$N" server "$URL" -- dispatch "$TMP/sessions-scale-$N.txt"
    stop_server
done
fi  # scale

# ---------------------------------------------------------------------------------------------
if want durable; then
# Durable dispatch (issue 28): SQLite with `persistence.sync: full` (every acknowledged change
# fsynced, group commit), over 1,000 sessions and on one hot session, interleaved with the same
# two scenarios on an in-memory server running beside it (idle while the other is measured), so
# that the durable/memory ratios come from the same minutes. Around each durable run the
# server's /metrics gives the group commits meanwhile (bench/tools/commitstats.py): mean commit
# time (BEGIN..COMMIT, the fsync), mean batch size, mean time a change waited to be durable.
log "durable dispatch (--storage sqlite:\$TMP/bench.db, sync full) beside memory, 1,000 sessions and one hot session"
MEM_URL=""; MEM_PID=""; MEM_PORT=""
if start_server durable-mem; then
    MEM_URL=http://127.0.0.1:$SERVER_PORT; MEM_PID=$SERVER_PID; MEM_PORT=$SERVER_PORT
    mksessions "$MEM_URL" 1000 "$TMP/sessions-durable-mem.txt" durable-mem-1000
    head -1 "$TMP/sessions-durable-mem.txt" > "$TMP/sessions-durable-mem-hot.txt"
fi
START_ENV=STATE_SERVER_PERSISTENCE_SYNC=full start_server durable --storage "sqlite:$TMP/bench.db" || true
if [ -n "$SERVER_PORT" ] && [ "$SERVER_PORT" != "$MEM_PORT" ]; then
    URL=http://127.0.0.1:$SERVER_PORT
    mksessions "$URL" 1000 "$TMP/sessions-durable.txt" durable-1000
    head -1 "$TMP/sessions-durable.txt" > "$TMP/sessions-durable-hot.txt"
    PHASE=durable
    COMMIT_SCEN=""
    commit_since() {
        timeout 30 $PY bench/tools/commitstats.py --url "$URL" --since "$TMP/commit-mark.json" \
            --name "durable-$COMMIT_SCEN-r$ROUND-commit" --scenario "$COMMIT_SCEN" --round "$ROUND" \
            --results "$RES" > "$RAW/commit-$COMMIT_SCEN-r$ROUND.txt" 2>&1 \
            || warn "commitstats.py failed: $(tail -c 300 "$RAW/commit-$COMMIT_SCEN-r$ROUND.txt")"
        tail -1 "$RAW/commit-$COMMIT_SCEN-r$ROUND.txt" | $PY -c 'import json,sys
try:
    r = json.loads(sys.stdin.read())
except ValueError:
    sys.exit(0)
print("   %-22s %s group commits, %s ms each (mean), %s changes per commit, a change waited %s ms (mean) to be durable" % (
    r["scenario"], r["commits"], r["commit_mean_ms"], r["mean_batch"], r["latency_mean_ms"]))'
    }
    durable_wrk() {  # durable_wrk SCENARIO SESSIONS_FILE
        COMMIT_SCEN=$1
        timeout 30 $PY bench/tools/commitstats.py --url "$URL" --mark "$TMP/commit-mark.json" \
            > "$RAW/commit-mark.txt" 2>&1 || warn "commitstats.py --mark failed: $(tail -c 300 "$RAW/commit-mark.txt")"
        WRK_SCRIPT=bench/wrk/sessions.lua WRK_PID=$SERVER_PID WRK_AFTER=commit_since \
            wrk_run "$1" durable "$URL" -- dispatch "$2"
    }
    for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
        wrk_run nginx nginx "$NGINX_URL"
        durable_wrk durable-dispatch-1000 "$TMP/sessions-durable.txt"
        if [ -n "$MEM_URL" ]; then
            WRK_SCRIPT=bench/wrk/sessions.lua WRK_PID=$MEM_PID \
                wrk_run mem-dispatch-1000 server "$MEM_URL" -- dispatch "$TMP/sessions-durable-mem.txt"
            WRK_SCRIPT=bench/wrk/sessions.lua WRK_PID=$MEM_PID \
                wrk_run mem-dispatch-hot server "$MEM_URL" -- dispatch "$TMP/sessions-durable-mem-hot.txt"
        fi
        durable_wrk durable-dispatch-hot "$TMP/sessions-durable-hot.txt"
    done
    ROUND=1
    rate_run rate-durable-dispatch durable "$URL" --mode dispatch --sessions "$TMP/sessions-durable.txt"
    stop_server
    ls -l "$TMP"/bench.db* > "$RAW/durable-files.txt" 2>&1
fi
if [ -n "$MEM_PID" ]; then
    SERVER_NAME=durable-mem; SERVER_PID=$MEM_PID; SERVER_PORT=$MEM_PORT
    stop_server
fi
fi  # durable

# ---------------------------------------------------------------------------------------------
if want postgres; then
# Several nodes on one PostgreSQL (issue 9, issue 15 item 6): a throwaway PostgreSQL (scripts/
# postgres-test-server.sh) with fsync ON, like the SQLite run's `sync: full`, and
# pg_stat_statements loaded. Each node runs in a cgroup v1 `cpu` group of its own with a quota of
# BENCH_NODE_CPU CPUs (default 0.10): on a 2-core machine shared by PostgreSQL, nginx, wrk and
# the nodes, a node held to a small quota is the bottleneck, so adding nodes can show scaling
# (PostgreSQL's, nginx's and wrk's CPU is reported beside it, to show they were not the limit;
# PostgreSQL costs about three times a node's CPU per dispatch, so at 0.15 the machine itself
# became the limit at 3 nodes — docs/PERFORMANCE.md).
# Nodes 1, 2, 3 are started one at a time on the same database and sessions; after each start,
# dispatch throughput directly (one wrk per node, in parallel, the 64 connections split between
# them) and through nginx (deploy/nginx's template, `--balance hash`: every request of a session
# to one node), interleaved with the static nginx baseline; around each run, the CPU of every
# process, the dispatches each node answered, its CFS throttling, and every statement the nodes
# sent PostgreSQL (pg_stat_statements, bench/tools/pgcost.py --mark/--since). Then the event
# latency on the same node and across nodes, and the statements one request costs PostgreSQL
# (bench/tools/pgcost.py).
log "several nodes on PostgreSQL (1, 2, 3 nodes; direct and through nginx by session)"
NODE_PIDS=()
NODE_PORTS=()
NODE_CGS=()  # per node: its cgroup folder, or "" without a quota
CLUSTER_NGINX_PID=""
SERVER_PORT=""; SERVER_PID=""
PG_URL=""

# The CPU quota of each node: cpu.cfs_quota_us = BENCH_NODE_CPU x cpu.cfs_period_us (100 ms).
NODE_CPU=${BENCH_NODE_CPU:-0.10}
CPU_ROOT=/sys/fs/cgroup/cpu
QUOTA_US=0
if ! [[ "$NODE_CPU" =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
    warn "BENCH_NODE_CPU=$NODE_CPU is not a number of CPUs: the nodes run without a quota"
    NODE_CPU=0
fi
if awk -v c="$NODE_CPU" 'BEGIN { exit !(c > 0) }'; then
    QUOTA_US=$(awk -v c="$NODE_CPU" 'BEGIN { printf "%d", c * 100000 }')
    if [ "$QUOTA_US" -lt 1000 ]; then
        warn "BENCH_NODE_CPU=$NODE_CPU is below the kernel's smallest quota (0.01 CPU): no quota"
        QUOTA_US=0
    elif ! [ -f "$CPU_ROOT/cpu.cfs_quota_us" ] || ! [ -w "$CPU_ROOT" ]; then
        warn "no writable cgroup v1 cpu hierarchy at $CPU_ROOT (needs root and cgroup v1): the nodes run without a CPU quota"
        QUOTA_US=0
    fi
fi
[ "$QUOTA_US" = 0 ] && NODE_CPU=0
NODE_CPU=$(awk -v c="$NODE_CPU" 'BEGIN { printf "%g", c }')  # as JSON reads it (0.15, not .150)
echo "{\"kind\": \"cluster_setup\", \"name\": \"cluster-setup\", \"node_cpu\": $NODE_CPU, \"quota_us\": $QUOTA_US, \"period_us\": 100000, \"duration_s\": $DURATION}" >> "$RES"
if [ "$QUOTA_US" -gt 0 ]; then
    echo "   each node: cgroup v1 cpu, cpu.cfs_quota_us=$QUOTA_US per cpu.cfs_period_us=100000 ($NODE_CPU CPU)"
else
    echo "   nodes without a CPU quota"
fi

if [ -z "$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null)" ]; then
    echo "installing: postgresql"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends postgresql \
        || warn "cannot install postgresql: the PostgreSQL phase is skipped"
fi
# Not under $TMP: as root, PostgreSQL runs as an unprivileged user, who cannot enter $TMP (0700).
PG_DIR=$(mktemp -u /tmp/sbench-pg.XXXXXX)
echo "POSTGRES_SERVER_OPTIONS='-c fsync=on -c shared_preload_libraries=pg_stat_statements -c max_connections=300' bash scripts/postgres-test-server.sh start \$PG_DIR   # -> \$PG_URL" >> "$TMP/commands.txt"
bash scripts/postgres-test-server.sh ensure-user 2> "$RAW/pg-user.err" || warn "no PostgreSQL test user: $(tail -1 "$RAW/pg-user.err")"
PG_URL=$(POSTGRES_SERVER_OPTIONS="-c fsync=on -c shared_preload_libraries=pg_stat_statements -c max_connections=300" \
    timeout 120 bash scripts/postgres-test-server.sh start "$PG_DIR" --watch $$ 2> "$RAW/pg-start.err") \
    || { warn "PostgreSQL did not start: $(tail -3 "$RAW/pg-start.err")"; PG_URL=""; }
PG_DB=${PG_URL##*/}

# make_node_cgroup I: a cpu cgroup with the quota for node I, in NODE_CG ("" without a quota).
# Removed when the phase ends, and by cleanup() on any exit.
make_node_cgroup() {
    local cg=$CPU_ROOT/sbench-$$-node$1
    NODE_CG=""
    [ "$QUOTA_US" -gt 0 ] || return 0
    [ -d "$cg" ] && remove_cgroup "$cg"
    if ! mkdir "$cg" 2>/dev/null; then
        warn "cannot make the cgroup $cg: node $1 runs WITHOUT its CPU quota"
        return 0
    fi
    NODE_CGROUPS+=("$cg")
    if ! { echo 100000 > "$cg/cpu.cfs_period_us" && echo "$QUOTA_US" > "$cg/cpu.cfs_quota_us"; } 2>/dev/null; then
        warn "cannot set the quota of $cg: node $1 runs WITHOUT its CPU quota"
        return 0
    fi
    NODE_CG=$cg
}

start_node() {  # start_node I: node I of the cluster on $PG_URL, in its cgroup
    local i=$1 out=$RAW/node$1.out err=$RAW/node$1.err port="" pid k
    make_node_cgroup "$i"
    local url=${NODE_PG_URL:-$PG_URL}  # NODE_PG_URL: another database of the same PostgreSQL
    shown "env $SERVER_ENV_SHOWN .build/release/state-server --port 0 --storage 'postgres://stateserver:***@127.0.0.1:\$PG_PORT/${url##*/}?sslmode=disable'   # node $i${NODE_CG:+, in a cgroup v1 cpu group of its own: cpu.cfs_quota_us=$QUOTA_US, cpu.cfs_period_us=100000}" \
        >> "$TMP/commands.txt"
    if [ -n "$NODE_CG" ]; then
        # The shell joins the group, then becomes the server: every thread it starts is in it.
        env "${SERVER_ENV[@]}" bash -c 'echo $$ > "$1/cgroup.procs" || exit 97; shift; exec "$@"' cgroup-join \
            "$NODE_CG" "$SERVER_BIN" --port 0 --storage "$url?sslmode=disable" > "$out" 2> "$err" &
    else
        env "${SERVER_ENV[@]}" "$SERVER_BIN" --port 0 --storage "$url?sslmode=disable" > "$out" 2> "$err" &
    fi
    pid=$!
    PIDS+=("$pid")
    for ((k = 0; k < 100; k++)); do
        port=$(sed -n 's#^listening on http://127\.0\.0\.1:\([0-9]*\).*#\1#p' "$out" 2>/dev/null | head -1)
        [ -n "$port" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "$port" ] || { warn "node $i did not start: $(tail -3 "$err")"; return 1; }
    if [ -n "$NODE_CG" ] && ! grep -qx "$pid" "$NODE_CG/cgroup.procs" 2>/dev/null; then
        warn "node $i (pid $pid) is not in its cgroup $NODE_CG: it runs WITHOUT its CPU quota"
    fi
    NODE_PIDS+=("$pid")
    NODE_PORTS+=("$port")
    NODE_CGS+=("$NODE_CG")
    echo "node $i pid $pid on port $port${NODE_CG:+ (quota $NODE_CPU CPU)}"
}

start_cluster_nginx() {  # nginx (deploy/nginx's template, by session) in front of every running node
    [ -n "$CLUSTER_NGINX_PID" ] && stop_pid "$CLUSTER_NGINX_PID" 5
    local port dir=$TMP/cluster-nginx k upstreams=()
    for k in "${NODE_PORTS[@]}"; do upstreams+=("127.0.0.1:$k"); done
    port=$(free_port)
    mkdir -p "$dir/logs" "$dir/tmp"
    # One address (the load generator's) stands for many clients: nginx's per-address limit is
    # lifted, and the internal listener takes a free port.
    bash deploy/nginx/render.sh --main --balance hash --listen "127.0.0.1:$port" --internal-listen "127.0.0.1:$(free_port)" \
        --connections-per-address 65535 "${upstreams[@]}" > "$dir/nginx.conf"
    echo "bash deploy/nginx/render.sh --main --balance hash --listen 127.0.0.1:\$CLUSTER_NGINX_PORT --internal-listen 127.0.0.1:\$FREE_PORT --connections-per-address 65535 <nodes> > \$TMP/cluster-nginx/nginx.conf; nginx -p \$TMP/cluster-nginx -c \$TMP/cluster-nginx/nginx.conf -g 'daemon off;'" >> "$TMP/commands.txt"
    "$NGINX" -p "$dir" -c "$dir/nginx.conf" -g 'daemon off;' 2> "$RAW/cluster-nginx.err" &
    CLUSTER_NGINX_PID=$!
    PIDS+=("$CLUSTER_NGINX_PID")
    CLUSTER_URL=http://127.0.0.1:$port
    for ((k = 0; k < 50; k++)); do
        curl -sf -m 2 "$CLUSTER_URL/healthz" >/dev/null && return 0
        sleep 0.1
    done
    warn "the cluster's nginx did not start: $(tail -3 "$RAW/cluster-nginx.err")"
    return 1
}

# CPU time (clock ticks) of processes, and of PostgreSQL (postmaster and its children).
ticks() { local t=0 p v; for p in "$@"; do v=$(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null) && t=$((t + v)); done; echo "$t"; }
pg_ticks() { local pm; pm=$(head -1 "$PG_DIR/data/postmaster.pid" 2>/dev/null) || { echo 0; return; }; ticks "$pm" $(pgrep -P "$pm"); }
CPU0_NODES=0; CPU0_PG=0
cpu_start() { CPU0_NODES=$(ticks "${NODE_PIDS[@]}"); CPU0_PG=$(pg_ticks); }
cpu_record() {  # cpu_record SCENARIO: the nodes' and PostgreSQL's CPU seconds since cpu_start
    local hz; hz=$(getconf CLK_TCK)
    $PY - "$RES" "$1" "$PHASE" "$ROUND" "$(( $(ticks "${NODE_PIDS[@]}") - CPU0_NODES ))" "$(( $(pg_ticks) - CPU0_PG ))" "$hz" <<'PYEOF'
import json, sys
res, scenario, phase, rnd, nodes, pg, hz = sys.argv[1:]
rec = {"kind": "cpu", "name": f"{phase}-{scenario}-r{rnd}-cpu", "scenario": scenario, "phase": phase,
       "round": int(rnd), "nodes_cpu_s": int(nodes) / int(hz), "pg_cpu_s": int(pg) / int(hz)}
open(res, "a").write(json.dumps(rec, sort_keys=True) + "\n")
PYEOF
}

# cluster_snapshot: one line of counters: the time (ns), the whole machine's busy and total CPU
# ticks (/proc/stat: every process, also other work on a shared machine), PostgreSQL's and
# nginx's CPU ticks, then for each node its CPU ticks, the dispatches it answered
# (stateserver_dispatch_duration_seconds_count) and its group's cpu.stat (nr_periods,
# nr_throttled, throttled_time in ns), and the time again (ns) once they are read.
cluster_snapshot() {
    local i line d st ng=0
    [ -n "$CLUSTER_NGINX_PID" ] && ng=$(ticks "$CLUSTER_NGINX_PID" $(pgrep -P "$CLUSTER_NGINX_PID"))
    line="$(date +%s%N) $(awk '$1 == "cpu" { printf "%d %d", $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat) $(pg_ticks) $ng"
    for i in "${!NODE_PIDS[@]}"; do
        d=$(curl -s -m 5 "http://127.0.0.1:${NODE_PORTS[$i]}/metrics" 2>/dev/null \
            | awk '$1 == "stateserver_dispatch_duration_seconds_count" { v = $2 } END { printf "%d", v + 0 }')
        st="0 0 0"
        [ -n "${NODE_CGS[$i]}" ] && st=$(awk '$1 == "nr_periods" { p = $2 } $1 == "nr_throttled" { t = $2 }
            $1 == "throttled_time" { n = $2 } END { printf "%d %d %d", p, t, n }' "${NODE_CGS[$i]}/cpu.stat" 2>/dev/null)
        line="$line $(ticks "${NODE_PIDS[$i]}") ${d:-0} ${st:-0 0 0}"
    done
    echo "$line $(date +%s%N)"
}
SNAP0=""
SNAP1=""
measure_start() {  # just before a load run: PostgreSQL's statistics reset, the counters read
    timeout 60 $PY bench/tools/pgcost.py --pg-dir "$PG_DIR" --db "$PG_DB" --mark "$TMP/pg-mark.txt" \
        >> "$RAW/pgmark.txt" 2>&1 || warn "pgcost.py --mark failed: $(tail -c 300 "$RAW/pgmark.txt")"
    SNAP1=""
    SNAP0=$(cluster_snapshot)
}
measure_stop() { SNAP1=$(cluster_snapshot); }  # right after the load run (wrk_run's WRK_AFTER)
measure_end() {  # measure_end SCENARIO WRK_CPU_SECONDS: a "cluster" record of the run
    local snap1=$SNAP1 pgjson hz
    [ -n "$snap1" ] || snap1=$(cluster_snapshot)
    pgjson=$(timeout 60 $PY bench/tools/pgcost.py --pg-dir "$PG_DIR" --db "$PG_DB" --since "$TMP/pg-mark.txt" 2>> "$RAW/pgmark.txt") \
        || { warn "pgcost.py --since failed: $(tail -c 300 "$RAW/pgmark.txt")"; pgjson='{}'; }
    hz=$(getconf CLK_TCK)
    $PY - "$RES" "$1" "$PHASE" "$ROUND" "$SNAP0" "$snap1" "$pgjson" "$2" "$hz" "$NODE_CPU" "$DURATION" <<'PYEOF'
import json, sys
res, scenario, phase, rnd, snap0, snap1, pgjson, wrk_cpu, hz, quota, duration = sys.argv[1:]
a, b = [list(map(int, s.split())) for s in (snap0, snap1)]
window_ns = b[0] - a[-1]  # from the end of the first reading to the start of the second
d = [y - x for x, y in zip(a[1:-1], b[1:-1])]
hz, duration = int(hz), float(duration)
pg = json.loads(pgjson or "{}")
machine_busy, machine_total = d[0], d[1]
d = d[2:]
nodes = []
for i in range(2, len(d), 5):
    ticks, dispatches, periods, throttled, throttled_ns = d[i:i + 5]
    nodes.append({"cpu_s": ticks / hz, "dispatches": dispatches, "periods": periods,
                  "throttled_periods": throttled, "throttled_s": throttled_ns / 1e9})
rec = {"kind": "cluster", "name": f"{phase}-{scenario}-r{rnd}-cluster", "scenario": scenario, "phase": phase,
       "round": int(rnd), "nodes": len(nodes), "node_cpu": float(quota), "duration_s": duration,
       "window_s": window_ns / 1e9,
       "pg_cpu_s": d[0] / hz, "nginx_cpu_s": d[1] / hz, "wrk_cpu_s": float(wrk_cpu),
       "machine_busy_s": machine_busy / hz, "machine_total_s": machine_total / hz,
       "pg_statements": pg.get("statements"), "pg_failed": pg.get("failed"),
       "pg_by_statement": pg.get("by_statement", []), "per_node": nodes}
open(res, "a").write(json.dumps(rec, sort_keys=True) + "\n")
done = sum(n["dispatches"] for n in nodes)
trips = ((rec["pg_statements"] or 0) + (rec["pg_failed"] or 0)) / done if done and rec["pg_statements"] is not None else None
span = window_ns / 1e9 or duration  # CPU seconds / span = cores used over the measured window
print("   %-22s each node: %s; PostgreSQL %.2f, nginx %.2f, wrk %.2f cores (machine: %.0f %% busy); %s round trips to PostgreSQL per dispatch" % (
    f"{phase}-{scenario}", "; ".join("%d dispatches, %.2f cores, %.2f ms CPU each, throttled %d/%d periods" % (
        n["dispatches"], n["cpu_s"] / span, 1000 * n["cpu_s"] / n["dispatches"] if n["dispatches"] else 0,
        n["throttled_periods"], n["periods"]) for n in nodes),
    rec["pg_cpu_s"] / span, rec["nginx_cpu_s"] / span, rec["wrk_cpu_s"] / span,
    100 * machine_busy / machine_total if machine_total else 0, "%.2f" % trips if trips is not None else "–"))
PYEOF
}

# wrk_parallel SCENARIO: one wrk per node at once (the connections split between them); one
# record per node with --part, which report.py adds up.
wrk_parallel() {
    local scenario=$1 n=${#NODE_PORTS[@]} i pids=() conns threads cpu0 wrk_cpu
    conns=$(( 64 / n )); threads=$(( n == 1 ? 2 : 1 ))
    measure_start
    cpu_start
    children_cpu; cpu0=$CHILDREN_CPU
    for ((i = 0; i < n; i++)); do
        local name=$PHASE-$scenario-r$ROUND-n$((i + 1)) out
        out=$RAW/wrk-$name.txt
        local cmd=(wrk "-t$threads" "-c$conns" "-d${DURATION}s" --latency -s bench/wrk/sessions.lua
                   "http://127.0.0.1:${NODE_PORTS[$i]}" -- dispatch "$TMP/sessions-pg.txt")
        echo "\$ ${cmd[*]}" > "$out"
        shown "${cmd[*]}   # node $((i + 1)) of $n, all at once" >> "$TMP/commands.txt"
        timeout $((DURATION + 30)) "${cmd[@]}" >> "$out" 2>&1 &
        pids+=($!)
    done
    CHILD="${pids[0]}"
    for i in "${!pids[@]}"; do wait "${pids[$i]}" || echo "wrk exited with status $?" >> "$RAW/wrk-$PHASE-$scenario-r$ROUND-n$((i + 1)).txt"; done
    CHILD=""
    measure_stop
    children_cpu; wrk_cpu=$(awk -v a="$cpu0" -v b="$CHILDREN_CPU" 'BEGIN { printf "%.3f", b - a }')
    cpu_record "$scenario"
    measure_end "$scenario" "$wrk_cpu"
    for ((i = 0; i < n; i++)); do
        local name=$PHASE-$scenario-r$ROUND-n$((i + 1))
        $PY bench/tools/wrkrecord.py --name "$name" --scenario "$scenario" --phase "$PHASE" --round "$ROUND" \
            --target postgres --raw "$RAW/wrk-$name.txt" --results "$RES" --part $((i + 1)) --pid "${NODE_PIDS[$i]}" \
            | $PY -c 'import json,sys; r=json.loads(sys.stdin.read()); print("   %-22s %10s req/s  p99 %8s us  non2xx %s" % (r["name"], r.get("rps"), r.get("p99_us"), r.get("non2xx")))'
    done
}

# One node against pgbench (issue 28): on the same PostgreSQL, in the same minutes, one node
# WITHOUT a CPU quota on a database of its own (1,000 sessions), wrk dispatching as in the
# one-node run (-t2 -c64, BENCH_DURATION), and pgbench's simple-update transaction (-N: UPDATE
# pgbench_accounts, SELECT, INSERT pgbench_history, in BEGIN..END) with the same client count
# and duration (-c64 -j2 -T BENCH_DURATION) on another database (pgbench -i -s 1), interleaved,
# BENCH_ROUNDS times. PostgreSQL's CPU is read around each (postmaster, its live children, and
# the children it reaped meanwhile: pgbench's backends end with the run).
pg_ticks_all() {
    local pm; pm=$(head -1 "$PG_DIR/data/postmaster.pid" 2>/dev/null) || { echo 0; return; }
    echo $(( $(ticks $(pgrep -P "$pm")) + $(awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat" 2>/dev/null || echo 0) ))
}
pgbench_phase() {
    local pgbench solo_url pgb_url pgb_pass pgb_conn out c0 c1 saveq
    log "one node (no CPU quota) against pgbench -N on the same PostgreSQL, $ROUNDS round(s) interleaved"
    pgbench=$(command -v pgbench || ls /usr/lib/postgresql/*/bin/pgbench 2>/dev/null | sort -V | tail -1)
    [ -x "$pgbench" ] || { warn "no pgbench: the node-against-pgbench runs are skipped"; return 0; }
    solo_url=$(timeout 60 bash scripts/postgres-test-server.sh createdb "$PG_DIR" stateserver_solo 2>> "$RAW/pg-createdb.err") \
        && pgb_url=$(timeout 60 bash scripts/postgres-test-server.sh createdb "$PG_DIR" pgbench 2>> "$RAW/pg-createdb.err") \
        || { warn "cannot create the databases for the pgbench runs: $(tail -2 "$RAW/pg-createdb.err")"; return 0; }
    echo "bash scripts/postgres-test-server.sh createdb \$PG_DIR stateserver_solo; bash scripts/postgres-test-server.sh createdb \$PG_DIR pgbench" >> "$TMP/commands.txt"
    # postgres://USER:PASSWORD@127.0.0.1:PORT/DB -> a conninfo without the password (PGPASSWORD).
    pgb_pass=$(echo "$pgb_url" | sed -n 's#^postgres://[^:]*:\([^@]*\)@.*#\1#p')
    pgb_conn=$(echo "$pgb_url" | sed -n 's#^postgres://\([^:]*\):[^@]*@\([^:/]*\):\([0-9]*\)/\(.*\)#host=\2 port=\3 user=\1 dbname=\4 sslmode=disable#p')
    shown "PGPASSWORD=*** pgbench -i -s 1 -q '$(echo "$pgb_conn" | sed 's/port=[0-9]*/port=$PG_PORT/')'" >> "$TMP/commands.txt"
    bg timeout 180 env PGPASSWORD="$pgb_pass" "$pgbench" -i -s 1 -q "$pgb_conn" > "$RAW/pgbench-init.txt" 2>&1 \
        || { warn "pgbench -i failed: $(tail -c 300 "$RAW/pgbench-init.txt")"; return 0; }
    saveq=$QUOTA_US; QUOTA_US=0
    NODE_PG_URL=$solo_url start_node solo || { QUOTA_US=$saveq; return 0; }
    QUOTA_US=$saveq
    mksessions "http://127.0.0.1:${NODE_PORTS[0]}" 1000 "$TMP/sessions-solo.txt" pg-solo-1000 \
        || { warn "no sessions for the one-node run"; return 0; }
    sed -n 1p "$TMP/sessions-solo.txt" > "$TMP/sessions-solo-hot.txt"
    PHASE=pg-solo
    for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
        cpu_start
        WRK_SCRIPT=bench/wrk/sessions.lua WRK_PID=${NODE_PIDS[0]} \
            wrk_run pg-solo-dispatch postgres "http://127.0.0.1:${NODE_PORTS[0]}" -- dispatch "$TMP/sessions-solo.txt"
        cpu_record pg-solo-dispatch
        # The same on one hot session: its changes pipelined (committed together behind the one
        # committing), where 1,000 sessions rarely have two changes in flight.
        cpu_start
        WRK_SCRIPT=bench/wrk/sessions.lua WRK_PID=${NODE_PIDS[0]} \
            wrk_run pg-solo-hot postgres "http://127.0.0.1:${NODE_PORTS[0]}" -- dispatch "$TMP/sessions-solo-hot.txt"
        cpu_record pg-solo-hot
        out=$RAW/pgbench-r$ROUND.txt
        shown "PGPASSWORD=*** pgbench -N -n -c 64 -j 2 -T $DURATION '$(echo "$pgb_conn" | sed 's/port=[0-9]*/port=$PG_PORT/')'" >> "$TMP/commands.txt"
        c0=$(pg_ticks_all)
        bg timeout $((DURATION + 60)) env PGPASSWORD="$pgb_pass" "$pgbench" -N -n -c 64 -j 2 -T "$DURATION" "$pgb_conn" > "$out" 2>&1 \
            || warn "pgbench -N (round $ROUND) failed: $(tail -c 300 "$out")"
        c1=$(pg_ticks_all)
        $PY - "$RES" "$out" "$ROUND" "$((c1 - c0))" "$(getconf CLK_TCK)" "$DURATION" <<'PYEOF'
import json, re, sys
res, out, rnd, ticks, hz, duration = sys.argv[1:]
text = open(out, errors="replace").read()
def num(pattern):
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None
rec = {"kind": "pgbench", "name": f"pg-solo-pgbench-r{rnd}", "scenario": "pgbench-simple-update", "phase": "pg-solo",
       "round": int(rnd), "clients": 64, "threads": 2, "duration_s": float(duration),
       "tps": num(r"tps = ([0-9.]+) \(without initial connection time\)"),
       "latency_avg_ms": num(r"latency average = ([0-9.]+) ms"),
       "transactions": num(r"number of transactions actually processed: ([0-9]+)"),
       "failed": num(r"number of failed transactions: ([0-9]+)"),
       "pg_cpu_s": int(ticks) / int(hz)}
open(res, "a").write(json.dumps(rec, sort_keys=True) + "\n")
print("   %-22s %s transactions/s (simple update), latency average %s ms, PostgreSQL CPU %.2f s" % (
    rec["name"], rec["tps"], rec["latency_avg_ms"], rec["pg_cpu_s"]))
PYEOF
    done
    ROUND=1
    kill -0 "${NODE_PIDS[0]}" 2>/dev/null || warn "the one node exited on its own: $(tail -3 "$RAW/nodesolo.err" | tr '\n' ' ')"
    stop_pid "${NODE_PIDS[0]}" 10
    NODE_PIDS=(); NODE_PORTS=(); NODE_CGS=()
}

if [ -n "$PG_URL" ]; then
    A=""
    sed_sessions() { sed -n "$1p" "$TMP/sessions-pg.txt" > "$2"; }
    for N in 1 2 3; do
        start_node "$N" || break
        if [ "$N" = 1 ]; then
            mksessions "http://127.0.0.1:${NODE_PORTS[0]}" 1000 "$TMP/sessions-pg.txt" pg-1000 \
                || { warn "no sessions on PostgreSQL: the phase is cut short"; break; }
            sed_sessions 1,10 "$TMP/sessions-pg-10.txt"
            sed_sessions 11,20 "$TMP/sessions-pg-10b.txt"
        fi
        start_cluster_nginx || break
        PHASE=pg-$N
        for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
            wrk_run nginx nginx "$NGINX_URL"
            wrk_parallel "pg-direct-$N"
            # Through nginx by session: first 4 dispatches on every session through it, so each
            # session lives on the node nginx sends it to (the steady state of that routing; the
            # direct run and a new node on the hash ring moved sessions), then the measured run.
            run timeout 150 $PY bench/tools/warm.py --url "$CLUSTER_URL" --sessions "$TMP/sessions-pg.txt" \
                --rounds 4 --timeout 120 > "$RAW/warm-$PHASE-r$ROUND.txt" 2>&1 \
                || warn "the warm-up through nginx ($PHASE) failed: $(tail -c 300 "$RAW/warm-$PHASE-r$ROUND.txt")"
            echo "   $(tail -1 "$RAW/warm-$PHASE-r$ROUND.txt")"
            measure_start
            cpu_start
            WRK_SCRIPT=bench/wrk/sessions.lua WRK_AFTER=measure_stop \
                wrk_run "pg-nginx-$N" postgres "$CLUSTER_URL" -- dispatch "$TMP/sessions-pg.txt"
            cpu_record "pg-nginx-$N"
            measure_end "pg-nginx-$N" "$WRK_CPU_S"
        done
        ROUND=1
        # Event latency with N nodes: dispatch on node 1; 10 sessions, one stream each, on node 1
        # (same node) or on node 2 (across nodes, from 2 nodes on).
        A=http://127.0.0.1:${NODE_PORTS[0]}
        sse_run "pg-same-node-$N" "$A" "$TMP/sessions-pg-10.txt" --n-sessions 10 --subs 1 --rounds 100 --dispatch-url "$A"
        if [ "$N" -ge 2 ]; then
            sse_run "pg-cross-node-$N" "http://127.0.0.1:${NODE_PORTS[1]}" "$TMP/sessions-pg-10b.txt" \
                --n-sessions 10 --subs 1 --rounds 100 --dispatch-url "$A"
        fi
    done
    if [ ${#NODE_PORTS[@]} -ge 2 ]; then
        A=http://127.0.0.1:${NODE_PORTS[0]}
        B=http://127.0.0.1:${NODE_PORTS[1]}
        run timeout 200 $PY bench/tools/pgcost.py --url "$A" --other-url "$B" \
            --pg-dir "$PG_DIR" --db "$PG_DB" --count 300 --name pgcost --results "$RES" > "$RAW/pgcost.txt" 2>&1 \
            || warn "pgcost.py reported errors: $(tail -c 400 "$RAW/pgcost.txt")"
        grep '^   ' "$RAW/pgcost.txt"
    fi
    [ -n "$CLUSTER_NGINX_PID" ] && stop_pid "$CLUSTER_NGINX_PID" 5
    for i in "${!NODE_PIDS[@]}"; do
        kill -0 "${NODE_PIDS[$i]}" 2>/dev/null || warn "node $((i + 1)) exited on its own during the PostgreSQL phase: $(tail -3 "$RAW/node$((i + 1)).err" | tr '\n' ' ')"
        stop_pid "${NODE_PIDS[$i]}" 10
    done
    NODE_PIDS=(); NODE_PORTS=(); NODE_CGS=(); CLUSTER_NGINX_PID=""; CLUSTER_URL=""
    pgbench_phase
    bash scripts/postgres-test-server.sh destroy "$PG_DIR" >/dev/null 2>&1 || true
fi
for cg in "${NODE_CGROUPS[@]}"; do remove_cgroup "$cg"; done
NODE_CGROUPS=()
fi  # postgres

# ---------------------------------------------------------------------------------------------
if want peer; then
log "the Python peer (FastAPI + uvicorn[standard], 1 worker, bench/peer/app.py)"
PEER_PORT=$(free_port)
PEER_CMD=($PY -m uvicorn app:app --app-dir bench/peer --host 127.0.0.1 --port "$PEER_PORT"
          --workers 1 --no-access-log --log-level warning)
shown "${PEER_CMD[*]}   # -> \$PEER_PID" >> "$TMP/commands.txt"
"${PEER_CMD[@]}" > "$RAW/peer.out" 2> "$RAW/peer.err" &
PEER_PID=$!
PIDS+=("$PEER_PID")
for ((i = 0; i < 100; i++)); do
    curl -sf -m 2 "http://127.0.0.1:$PEER_PORT/healthz" >/dev/null && break
    sleep 0.1
done
if curl -sf -m 2 "http://127.0.0.1:$PEER_PORT/healthz" >/dev/null; then
    PURL=http://127.0.0.1:$PEER_PORT
    mksessions "$PURL" 1000 "$TMP/sessions-peer.txt" peer-1000
    PHASE=peer
    for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
        wrk_run nginx nginx "$NGINX_URL"
        WRK_SCRIPT=bench/wrk/sessions.lua WRK_PID=$PEER_PID \
            wrk_run peer-dispatch-1000 peer "$PURL" -- dispatch "$TMP/sessions-peer.txt"
        WRK_SCRIPT=bench/wrk/sessions.lua WRK_PID=$PEER_PID \
            wrk_run peer-state-1000 peer "$PURL" -- state "$TMP/sessions-peer.txt"
    done
    ROUND=1
    rate_run rate-peer-dispatch peer "$PURL" --mode dispatch --sessions "$TMP/sessions-peer.txt"
    sed -n 1p "$TMP/sessions-peer.txt" > "$TMP/peer-a.txt"
    sed -n 2,101p "$TMP/sessions-peer.txt" > "$TMP/peer-b.txt"
    sse_run peer-fanout-1x1000 "$PURL" "$TMP/peer-a.txt" --n-sessions 1 --subs 1000 --rounds 20 --pid "$PEER_PID" --rss
    sse_run peer-fanout-100x10 "$PURL" "$TMP/peer-b.txt" --n-sessions 100 --subs 10 --rounds 20 --pid "$PEER_PID"
    kill -0 "$PEER_PID" 2>/dev/null || warn "the peer exited during its runs: $(tail -5 "$RAW/peer.err")"
else
    warn "the peer did not start: $(tail -5 "$RAW/peer.err")"
fi
stop_pid "$PEER_PID" 10
fi  # peer

# ---------------------------------------------------------------------------------------------
log "report"
stop_pid "$NGINX_PID" 5
echo "end: $(date -u '+%Y-%m-%d %H:%M:%S UTC')" >> "$TMP/run-info.txt"
echo "loadavg at end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$TMP/run-info.txt"
echo "nchan workers: $NCHAN_WORKERS" >> "$TMP/run-info.txt"
echo "seconds: $(( $(date +%s) - T_START ))" >> "$TMP/run-info.txt"
$PY bench/report.py --dir "$TMP" ${DOC:+--doc "$DOC"} --nginx "$NGINX" --python "$PY" --phases "$PHASES"
