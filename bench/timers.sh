#!/usr/bin/env bash
# 100,000 pending timers at rest (issue 38): what they cost a server that is not firing any.
#
#   bash bench/timers.sh [BINARY]          (BINARY: .build/release/state-server)
#
# SQLite: one database of SESSIONS sessions with PER todos each is made over HTTP, then copied;
# the copy gets one timer per todo, due in a day (SESSIONS × PER timers): through HTTP with the
# todos feature's `{"type":"remind","id":I,"after":86400}` when the server has it, else written
# straight into the `timers` table in the server's own row format (bench/tools/timers.py rows;
# the report says which). Then, ROUNDS times, alternating which goes first, the server is
# started on each file (the baseline: same sessions and todos, no timers) and measured: exec →
# "listening on" → first `/readyz` 200, RSS and CPU at ready, RSS after SETTLE s, CPU seconds
# (utime + stime of all threads, /proc/PID/stat) over IDLE s with no request, then /metrics
# (stateserver_timers_pending, stateserver_sessions_in_memory: a start that loaded the sessions
# that have timers would show them). Memory storage (only when `remind` exists): a fresh server
# makes the same sessions (and the timers) over HTTP, then the same RSS and idle CPU.
# PostgreSQL (a throwaway server from scripts/postgres-test-server.sh, pg_stat_statements
# loaded): the same two databases and measurements, plus PostgreSQL's own CPU over the idle
# window and the statements on state_timers meanwhile (the scheduler polls shared storage).
#
# Knobs: TIMERS_SESSIONS (10000), TIMERS_PER_SESSION (10; at most 1,000, timers.maxPerStore),
# TIMERS_ROUNDS (3), TIMERS_IDLE (20), TIMERS_SETTLE (5), TIMERS_MEMORY (auto: when `remind`
# exists; no), TIMERS_MEMORY_ROUNDS (2), TIMERS_POSTGRES (auto: when Debian's PostgreSQL is
# installed; no). Prints the tables (markdown) and the raw records'
# path. Only 127.0.0.1; every server it starts is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
SOURCE_BIN=${1:-.build/release/state-server}
[ -x "$SOURCE_BIN" ] || { echo "timers: $SOURCE_BIN is not an executable (swift build -c release --product state-server)" >&2; exit 1; }
SESSIONS=${TIMERS_SESSIONS:-10000}; PER=${TIMERS_PER_SESSION:-10}; ROUNDS=${TIMERS_ROUNDS:-3}
IDLE=${TIMERS_IDLE:-20}; SETTLE=${TIMERS_SETTLE:-5}; MEMORY=${TIMERS_MEMORY:-auto}
MEMORY_ROUNDS=${TIMERS_MEMORY_ROUNDS:-2}; POSTGRES=${TIMERS_POSTGRES:-auto}; AFTER=86400
W=$(mktemp -d "${TMPDIR:-/tmp}/timers-bench.XXXXXX")
SERVER=""
PG_DIR=""
cleanup() {
    [ -n "$SERVER" ] && stop_pid "$SERVER"
    [ -n "$PG_DIR" ] && bash scripts/postgres-test-server.sh destroy "$PG_DIR" > /dev/null 2>&1
    true
}
trap cleanup EXIT
trap 'exit 1' INT TERM
# A copy named ssbench: other work on a shared machine that stops `state-server` by name
# cannot stop this one (as bench/run.sh does).
cp -p "$SOURCE_BIN" "$W/ssbench"
export STATE_SERVER_LOG_LEVEL=warning STATE_SERVER_SESSIONS_MAX=1000000 \
    STATE_SERVER_LIMITS_REQUESTS_PER_SECOND=100000000 STATE_SERVER_LIMITS_SESSIONS_PER_MINUTE=1000000 \
    STATE_SERVER_LIMITS_DISPATCHES_PER_SECOND=1000000 STATE_SERVER_LIMITS_CONNECTIONS_PER_ADDRESS=1000000 \
    STATE_SERVER_CLUSTER_SECRET=timers-bench-secret-only-for-127.0.0.1-nodes
RESULTS=$W/results.jsonl
T=python3
log() { echo "timers: $(date -u +%H:%M:%S) $*" >&2; }

start() {  # start STORAGE: a server in the background with quick commits while data is made
    env STATE_SERVER_PERSISTENCE_SYNC=normal "$W/ssbench" --port 0 --storage "$1" > "$W/out" 2>> "$W/err" &
    SERVER=$!
    PORT=$(wait_listening "$SERVER" "$W/out" "$W/err" timers) || exit 1
}
stop() { stop_pid "$SERVER" 30; wait "$SERVER" 2>/dev/null || true; SERVER=""; }

log "$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $SESSIONS sessions × $PER todos; raw outputs in $W"
log "making the baseline database: sessions and todos over HTTP"
start "sqlite:$W/base.db"
$T bench/tools/timers.py populate --url "http://127.0.0.1:$PORT" --sessions "$SESSIONS" --items "$PER" \
    --out "$W/sessions.txt" | tee "$W/populate.json" >&2
stop
$T -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute("PRAGMA wal_checkpoint(TRUNCATE)"); c.close()' "$W/base.db"
cp "$W/base.db" "$W/timers.db"

log "scheduling $((SESSIONS * PER)) timers due in ${AFTER} s"
start "sqlite:$W/timers.db"
set +e
$T bench/tools/timers.py remind --url "http://127.0.0.1:$PORT" --sessions-file "$W/sessions.txt" --items "$PER" \
    --after "$AFTER" > "$W/remind.json"
rc=$?
set -e
stop
cat "$W/remind.json" >&2
if [ "$rc" = 0 ]; then
    METHOD=http
elif [ "$rc" = 3 ]; then
    METHOD=rows
    log "the todos feature has no remind: writing the timers table's rows directly"
    $T bench/tools/timers.py rows --db "$W/timers.db" --items "$PER" --after "$AFTER" | tee "$W/rows.json" >&2
else
    echo "timers: scheduling failed (exit $rc)" >&2; exit 1
fi
$T -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute("PRAGMA wal_checkpoint(TRUNCATE)"); c.close()' "$W/timers.db"
log "database files: baseline $(stat -c %s "$W/base.db") B, with timers $(stat -c %s "$W/timers.db") B"

measure() {  # measure LABEL STORAGE ROUND [ARGS...]
    local label=$1 storage=$2 round=$3
    shift 3
    log "$label round $round"
    $T bench/tools/timers.py measure --bin "$W/ssbench" --storage "$storage" --label "$label" --round "$round" \
        --settle "$SETTLE" --idle "$IDLE" --results "$RESULTS" --stderr "$W/err" "$@" > /dev/null
}
for ((r = 1; r <= ROUNDS; r++)); do
    if ((r % 2)); then
        measure sqlite-baseline "sqlite:$W/base.db" "$r"; measure sqlite-timers "sqlite:$W/timers.db" "$r"
    else
        measure sqlite-timers "sqlite:$W/timers.db" "$r"; measure sqlite-baseline "sqlite:$W/base.db" "$r"
    fi
done
if [ "$MEMORY" != no ] && [ "$METHOD" = http ]; then
    for ((r = 1; r <= MEMORY_ROUNDS; r++)); do
        measure memory-baseline memory "$r" --populate "$SESSIONS" --items "$PER" --sessions-out "$W/m.txt"
        measure memory-timers memory "$r" --populate "$SESSIONS" --items "$PER" --sessions-out "$W/m.txt" \
            --remind-after "$AFTER"
    done
fi
if [ "$POSTGRES" != no ] && ls -d /usr/lib/postgresql/*/bin > /dev/null 2>&1; then
    # Shared storage: the scheduler looks at the index every second (TimerScheduler's
    # sharedPollInterval), so here the timers' idle cost is PostgreSQL's too.
    PG_DIR=$(mktemp -u /tmp/timers-pg.XXXXXX)
    log "PostgreSQL in $PG_DIR (fsync off, pg_stat_statements)"
    bash scripts/postgres-test-server.sh ensure-user > /dev/null
    POSTGRES_SERVER_OPTIONS="-c shared_preload_libraries=pg_stat_statements" \
        timeout 120 bash scripts/postgres-test-server.sh start "$PG_DIR" --watch $$ > /dev/null
    for db in timers_base timers_timers; do
        url=$(timeout 60 bash scripts/postgres-test-server.sh createdb "$PG_DIR" $db)
        bash scripts/postgres-test-server.sh sql "$PG_DIR" $db "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" > /dev/null
        log "PostgreSQL $db: sessions and todos over HTTP"
        start "$url?sslmode=disable"
        $T bench/tools/timers.py populate --url "http://127.0.0.1:$PORT" --sessions "$SESSIONS" --items "$PER" \
            --out "$W/pg-sessions.txt" | tee "$W/pg-populate-$db.json" >&2
        if [ $db = timers_timers ] && [ "$METHOD" = http ]; then
            $T bench/tools/timers.py remind --url "http://127.0.0.1:$PORT" --sessions-file "$W/pg-sessions.txt" \
                --items "$PER" --after "$AFTER" | tee "$W/pg-remind.json" >&2
        fi
        stop
        if [ $db = timers_timers ] && [ "$METHOD" = rows ]; then
            # The same rows as SQLite's, written with one INSERT ... SELECT.
            bash scripts/postgres-test-server.sh sql "$PG_DIR" $db "INSERT INTO state_timers
                (session, feature, id, action, public_action, due, scheduled_at)
                SELECT s.id, 'todos', 'remind-' || k, convert_to('{\"type\":\"toggle\",\"id\":\"' || k || '\"}', 'UTF8'),
                    convert_to('{\"type\":\"toggle\",\"id\":\"' || k || '\"}', 'UTF8'),
                    (extract(epoch FROM now()) * 1000)::bigint + $AFTER * 1000 + k % 1000,
                    (extract(epoch FROM now()) * 1000)::bigint
                FROM state_sessions s, generate_series(1, $PER) k" > /dev/null
            bash scripts/postgres-test-server.sh sql "$PG_DIR" $db "VACUUM ANALYZE state_timers" > /dev/null
        fi
        log "PostgreSQL $db: $(bash scripts/postgres-test-server.sh sql "$PG_DIR" $db "SELECT count(*) FROM state_timers") timers"
        eval "PG_URL_$db=\$url"
    done
    for ((r = 1; r <= ROUNDS; r++)); do
        for arm in $( ((r % 2)) && echo "base timers" || echo "timers base"); do
            db=timers_$arm; url_var=PG_URL_$db
            label=postgres-$([ $arm = base ] && echo baseline || echo timers)
            measure "$label" "${!url_var}?sslmode=disable" "$r" --pg-dir "$PG_DIR" --pg-db "$db"
        done
    done
    bash scripts/postgres-test-server.sh destroy "$PG_DIR" > /dev/null 2>&1 || true
    PG_DIR=""
fi
log "done, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $SESSIONS sessions × $PER todos, timers made by: $METHOD, $ROUNDS round(s), idle window ${IDLE} s after ${SETTLE} s"
$T bench/tools/timers.py report --results "$RESULTS" --timers-label "$((SESSIONS * PER)) timers"
echo
echo "making the data: $(cat "$W/populate.json"); timers: $(cat "$W/remind.json") $(cat "$W/rows.json" 2>/dev/null)"
echo "raw records: $RESULTS"
