# Sourced by the test scripts (schemathesis.sh, openapi-client-check.sh): one state-server on a
# free port of 127.0.0.1 for the length of the script.
#
#   start_server NAME ARGS...   runs "$BIN" --host 127.0.0.1 --port 0 ARGS... with its output in
#                               "$WORK", waits for its first line `listening on http://...`, and
#                               sets SERVER_PID and BASE; on failure prints its output, exits 1
#   stop_server                 SIGTERM, then SIGKILL after 5 s (for the caller's EXIT trap)
#
# The caller sets BIN and WORK (a temporary folder it removes itself).

SERVER_PID=""
BASE=""

start_server() {
    local name=$1
    shift
    "$BIN" --host 127.0.0.1 --port 0 "$@" >"$WORK/stdout" 2>"$WORK/stderr" &
    SERVER_PID=$!
    local port="" line
    for _ in $(seq 300); do
        line=$(head -n 1 "$WORK/stdout" 2>/dev/null || true)
        if [[ "$line" =~ ^listening\ on\ http://127\.0\.0\.1:([0-9]+)$ ]]; then
            port=${BASH_REMATCH[1]}
            break
        fi
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$port" ]; then
        echo "$name: the server did not print 'listening on http://127.0.0.1:PORT'" >&2
        cat "$WORK/stdout" "$WORK/stderr" >&2
        exit 1
    fi
    BASE="http://127.0.0.1:$port"
}

stop_server() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$SERVER_PID" 2>/dev/null || true
    fi
}
