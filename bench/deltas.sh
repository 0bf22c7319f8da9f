#!/usr/bin/env bash
# What delta event streams (`GET .../events?delta=json-patch`) save: bytes per event on the wire
# and the server's fan-out CPU, full streams vs delta streams, for one session whose todo list
# holds 400 items of 400 random characters (about 175 KB of state) watched by 100 streams.
#
#   bash bench/deltas.sh [BINARY]          (default: .build/release/state-server)
#
# Each phase runs on a fresh server (a copy of BINARY named ssdelta, so that other work on a
# shared machine that stops `state-server` processes by name cannot stop it) and a fresh
# database, so one phase's memory and caches do not carry into the next: per storage and round,
# full then delta. bench/tools/deltas.py does the measuring and the checking (every delta stream
# applies its patches and must end equal to GET .../state/todos, or the run fails).
#
# Knobs (environment): DELTA_SUBS (streams, 100), DELTA_CHANGES (changes per phase, 200),
# DELTA_ROUNDS (full/delta pairs per storage, 2), DELTA_STORAGES ("memory sqlite"; sqlite is a
# fresh file per phase, persistence.sync full), DELTA_ITEMS (400), DELTA_TITLE (characters per
# title, 400; todos allows 500), DELTA_VERIFY (check only the first N streams, 0 = all),
# DELTA_BUDGET (seconds before the watchdog stops the run, 600).
#
# Only 127.0.0.1; every process it starts is stopped on exit, failure or Ctrl-C; raw outputs
# stay in the temp dir it prints (/tmp/deltas.*). About 70 s on the 2-core project machine.
set -uo pipefail
exec 3>&1 4>&2  # the terminal, for messages from traps
cd "$(dirname "$0")/.."
SOURCE_BIN=${1:-.build/release/state-server}
[ -x "$SOURCE_BIN" ] || { echo "usage: bench/deltas.sh [BINARY] (no executable at $SOURCE_BIN: `make release` builds it, or pass one)" >&2; exit 2; }
SUBS=${DELTA_SUBS:-100}
CHANGES=${DELTA_CHANGES:-200}
ROUNDS=${DELTA_ROUNDS:-2}
STORAGES=${DELTA_STORAGES:-memory sqlite}
ITEMS=${DELTA_ITEMS:-400}
TITLE=${DELTA_TITLE:-400}
VERIFY=${DELTA_VERIFY:-0}
BUDGET=${DELTA_BUDGET:-600}
T_START=$(date +%s)

TMP=$(mktemp -d /tmp/deltas.XXXXXX)
RES=$TMP/results.jsonl
mkdir -p "$TMP/bin"
: > "$RES"
cp -p "$SOURCE_BIN" "$TMP/bin/ssdelta"
SERVER_PID=""
SERVER_PORT=""
WATCHDOG=""
CHILD=""
FAILED=()

# shellcheck source=bench/lib.sh
source bench/lib.sh  # stop_pid

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    [ -n "$CHILD" ] && stop_pid "$CHILD" 5
    [ -n "$SERVER_PID" ] && stop_pid "$SERVER_PID" 5
    [ -n "$WATCHDOG" ] && kill "$WATCHDOG" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$TMP/bin"  # the 170 MB copy of the binary; the outputs stay
    echo "deltas: raw outputs in $TMP" >&3
    exit $rc
}
trap cleanup EXIT
trap 'echo "deltas: interrupted, stopping everything it started" >&4; exit 130' INT TERM

# The watchdog ends a run that overruns its budget (each phase also has its own timeout).
(
    trap 'kill "$sp" 2>/dev/null; exit 0' TERM
    sleep "$BUDGET" & sp=$!
    wait "$sp" && { echo "deltas: time budget of ${BUDGET}s used up, stopping" >&4; kill -TERM $$; }
) &
WATCHDOG=$!

# Runs a step in the background and waits for it, so that a trapped signal interrupts the wait.
bg() {
    "$@" &
    CHILD=$!
    wait "$CHILD"
    local rc=$?
    CHILD=""
    return $rc
}

start_server() {  # start_server NAME [flags...]
    local name=$1 i; shift
    env STATE_SERVER_LOG_LEVEL=warning STATE_SERVER_STREAMS_PER_SESSION=$((SUBS + 10)) \
        STATE_SERVER_LIMITS_CONNECTIONS_PER_ADDRESS=0 STATE_SERVER_LIMITS_REQUESTS_PER_SECOND=0 STATE_SERVER_LIMITS_DISPATCHES_PER_SECOND=0 \
        "$TMP/bin/ssdelta" --port 0 "$@" > "$TMP/server-$name.out" 2> "$TMP/server-$name.err" &
    SERVER_PID=$!
    SERVER_PORT=""
    for ((i = 0; i < 100; i++)); do
        SERVER_PORT=$(sed -n 's#^listening on http://127\.0\.0\.1:\([0-9]*\).*#\1#p' "$TMP/server-$name.out" 2>/dev/null | head -1)
        [ -n "$SERVER_PORT" ] && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    echo "deltas: server '$name' did not start: $(tail -3 "$TMP/server-$name.err")" >&2
    return 1
}

stop_server() {  # stop_server NAME: stops it; a server that died on its own is a failure
    local name=$1 status
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        wait "$SERVER_PID" 2>/dev/null; status=$?
        FAILED+=("$name: the server exited on its own (status $status): $(tail -3 "$TMP/server-$name.err" | tr '\n' ' ')")
    else
        stop_pid "$SERVER_PID" 10
        wait "$SERVER_PID" 2>/dev/null
    fi
    SERVER_PID=""
}

echo "binary: $SOURCE_BIN, sha256 $(sha256sum "$SOURCE_BIN" | cut -c1-12); git $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "machine: $(nproc) cores, loadavg at start $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$SUBS streams, $CHANGES changes per phase, $ITEMS items of $TITLE characters, $ROUNDS rounds, storages: $STORAGES"
for storage in $STORAGES; do
    for ((round = 1; round <= ROUNDS; round++)); do
        for mode in full delta; do
            name=$storage-r$round-$mode
            flags=()
            case $storage in
                memory) ;;
                sqlite) flags=(--storage "sqlite:$TMP/$name.db") ;;
                *) echo "deltas: unknown storage '$storage' (memory or sqlite)" >&2; exit 2 ;;
            esac
            printf '== %-18s [%ss] ' "$name" "$(( $(date +%s) - T_START ))"
            start_server "$name" "${flags[@]}" || { FAILED+=("$name: no server"); echo; continue; }
            bg timeout 300 python3 bench/tools/deltas.py --url "http://127.0.0.1:$SERVER_PORT" --pid "$SERVER_PID" \
                --mode "$mode" --subs "$SUBS" --changes "$CHANGES" --items "$ITEMS" --title "$TITLE" \
                --verify "$VERIFY" --storage "$storage" --round "$round" --results "$RES" --timeout 240 \
                > "$TMP/$name.txt" 2>&1
            rc=$?
            stop_server "$name"
            if [ $rc != 0 ]; then
                FAILED+=("$name: deltas.py exited with status $rc: $(tail -c 400 "$TMP/$name.txt")")
                echo "FAILED"
            else
                tail -1 "$TMP/$name.txt" | python3 -c 'import json, sys
r = json.loads(sys.stdin.read())
print("%8.0f B/event  %6.2f ms CPU/event  p50 %5.1f ms  verified %d" % (r["wire_bytes_per_event"], r["server_cpu_ms_per_event"], r["latency_p50_ms"], r["verified_streams"]))'
            fi
            rm -f "$TMP/$name.db" "$TMP/$name.db-wal" "$TMP/$name.db-shm" "$TMP/$name.db.lock"
        done
    done
done
echo "loadavg at end: $(cut -d' ' -f1-3 /proc/loadavg), $(( $(date +%s) - T_START )) s"
python3 bench/tools/deltas.py --report "$RES" || FAILED+=("the report found failed phases")
if [ ${#FAILED[@]} -gt 0 ]; then
    printf 'deltas: FAILED: %s\n' "${FAILED[@]}" >&2
    exit 1
fi
