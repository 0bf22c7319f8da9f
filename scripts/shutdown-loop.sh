#!/usr/bin/env bash
# Graceful stops of the real binary, in a loop, under CPU load (issue 24 item 8): each run starts
# `state-server --port 0`, creates a session, opens three event streams, dispatches three
# changes, waits until every stream has them, sends SIGTERM (odd runs) or SIGINT (even runs),
# and expects the process to exit by itself with status 0 within 10 s — not by a signal (an
# abort in libmicrohttpd was one: MHD_quiesce_daemon racing its own epoll workers). Storage
# alternates by pairs of runs: SQLite, then memory. Prints one line per failed run and a count.
#
#   bash scripts/shutdown-loop.sh [N]      N stops (default 10)
#
# Environment: STATE_SERVER_BIN (default .build/debug/state-server); SHUTDOWN_LOOP_LOAD busy
# loops running meanwhile (default: one per core; 0 for none; each bounded in time and ended by
# id when the loop ends); SHUTDOWN_LOOP_KEEP=1 keeps the folder with every run's stderr.
# Exits 1 if any stop failed. Needs curl.
set -uo pipefail

cd "$(dirname "$0")/.."
runs=${1:-10}
bin=$(realpath -m "${STATE_SERVER_BIN:-.build/debug/state-server}")
[ -x "$bin" ] || { echo "shutdown-loop: no state-server binary at $bin (swift build, or set STATE_SERVER_BIN)" >&2; exit 2; }
command -v curl >/dev/null || { echo "shutdown-loop: curl missing" >&2; exit 2; }
loops=${SHUTDOWN_LOOP_LOAD:-$(nproc)}

dir=$(mktemp -d "${TMPDIR:-/tmp}/shutdown-loop.XXXXXX")
load_pids=()
run_pids=()
cleanup() {
    local pid
    for pid in "${run_pids[@]}" "${load_pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
    wait 2>/dev/null
    if [ "${SHUTDOWN_LOOP_KEEP:-0}" = 1 ]; then echo "shutdown-loop: runs kept in $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The load: busy loops, each ending by itself after a bound (30 s a run, at least 5 minutes) in
# case this script is killed before its cleanup; their output goes nowhere, so a caller reading
# ours does not wait for them.
bound=$((runs * 30 > 300 ? runs * 30 : 300))
for _ in $(seq 1 "$loops"); do
    bash -c "end=\$((SECONDS + $bound)); while [ \$SECONDS -lt \$end ]; do :; done" </dev/null >/dev/null 2>&1 &
    load_pids+=($!)
done

# until_true SECONDS COMMAND...: runs COMMAND every 50 ms until it succeeds; fails at the deadline.
until_true() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.05
    done
}

# streams_have EVENT COUNT RUN_DIR: every stream of the run has COUNT events named EVENT.
streams_have() {
    local s count
    for s in 1 2 3; do
        count=$(grep -c "^event: $1" "$3/stream$s" 2>/dev/null) || count=0
        [ "${count:-0}" -ge "$2" ] || return 1
    done
}

exited() { ! kill -0 "$1" 2>/dev/null || [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" = Z ]; }

# one_run I: prints nothing and returns 0 on a clean stop, else prints why and returns 1.
one_run() {
    local i=$1 run="$dir/run$1" signal storage
    mkdir -p "$run"
    if [ $((i % 2)) = 1 ]; then signal=TERM; else signal=INT; fi
    if [ $(((i - 1) / 2 % 2)) = 0 ]; then storage="sqlite:$run/state.db"; else storage=memory; fi
    run_pids=()
    : >"$run/stdout"
    env -u STATE_SERVER_PORT -u STATE_SERVER_STORAGE -u STATE_SERVER_CONFIG \
        "$bin" --host 127.0.0.1 --port 0 --storage "$storage" >"$run/stdout" 2>"$run/stderr" </dev/null &
    local pid=$!
    run_pids+=("$pid")
    if ! until_true 30 grep -q '^listening on http://' "$run/stdout"; then
        echo "run $i ($storage): no 'listening on' line after 30 s"
        kill -KILL "$pid" 2>/dev/null
        return 1
    fi
    local base
    base=$(head -n 1 "$run/stdout" | sed -E 's/^listening on //')
    local created id token
    created=$(curl -sf -X POST "$base/v1/sessions") || { echo "run $i: POST /v1/sessions failed"; kill -KILL "$pid"; return 1; }
    id=$(printf '%s' "$created" | sed -E 's/.*"id":"([^"]*)".*/\1/')
    token=$(printf '%s' "$created" | sed -E 's/.*"token":"([^"]*)".*/\1/')
    local s
    for s in 1 2 3; do
        curl -sN -H "Authorization: Bearer $token" "$base/v1/sessions/$id/events" >"$run/stream$s" 2>/dev/null &
        run_pids+=($!)
    done
    # A stream is open once its first event, the snapshot, has come.
    if ! until_true 20 streams_have snapshot 1 "$run"; then
        echo "run $i ($storage): the three streams did not all open within 20 s"
        kill -KILL "$pid"
        return 1
    fi
    for s in 1 2 3; do
        curl -sf -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
            -d '{"feature": "counter", "action": {"type": "increment"}}' \
            "$base/v1/sessions/$id/dispatch" >/dev/null || { echo "run $i: dispatch $s failed"; kill -KILL "$pid"; return 1; }
    done
    if ! until_true 20 streams_have state 3 "$run"; then
        echo "run $i ($storage): the three streams did not all get the three changes within 20 s"
        kill -KILL "$pid"
        return 1
    fi
    local sent=$SECONDS
    kill -"$signal" "$pid"
    # Until it has exited (a zombie, our child not yet waited for, counts as exited).
    until_true 10 exited "$pid"
    if ! exited "$pid"; then
        echo "run $i ($storage, SIG$signal): still running 10 s after the signal; stderr: $(tail -n 3 "$run/stderr")"
        kill -KILL "$pid"
        wait "$pid" 2>/dev/null
        return 1
    fi
    local status=0
    wait "$pid" || status=$?
    for s in "${run_pids[@]:1}"; do kill -KILL "$s" 2>/dev/null; wait "$s" 2>/dev/null; done
    run_pids=()
    if [ "$status" -ne 0 ]; then
        local why="status $status"
        [ "$status" -gt 128 ] && why="signal $((status - 128)) ($(kill -l $((status - 128)) 2>/dev/null))"
        echo "run $i ($storage, SIG$signal): $why $((SECONDS - sent)) s after the signal; stderr: $(grep -E 'panic|fatal|Fatal' "$run/stderr" | head -n 3)"
        return 1
    fi
    [ "${SHUTDOWN_LOOP_KEEP:-0}" = 1 ] || rm -rf "$run"
    return 0
}

failed=0
started=$SECONDS
for i in $(seq 1 "$runs"); do
    one_run "$i" || failed=$((failed + 1))
done
echo "shutdown-loop: $failed of $runs stops failed ($loops busy loops, $((SECONDS - started)) s, $bin)"
[ "$failed" -eq 0 ]
