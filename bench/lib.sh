# Shell helpers shared by the bench scripts (sourced after they cd to the repository root).

stop_pid() {  # stop_pid PID [seconds]: TERM, wait, then KILL
    local pid=$1 wait_s=${2:-10} i
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null
    for ((i = 0; i < wait_s * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null
}

wait_listening() {  # wait_listening PID OUT ERR LABEL: prints the port the server says it listens on
    local pid=$1 out=$2 err=$3 label=$4 port _
    for _ in $(seq 300); do
        port=$(sed -n 's#^listening on http://127\.0\.0\.1:\([0-9]*\).*#\1#p' "$out" | head -1)
        [ -n "$port" ] && { echo "$port"; return 0; }
        kill -0 "$pid" 2>/dev/null || { echo "$label did not start: $(tail -3 "$err")" >&2; return 1; }
        sleep 0.1
    done
    echo "$label did not start listening within 30 s" >&2
    return 1
}
