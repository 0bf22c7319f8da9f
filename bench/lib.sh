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
