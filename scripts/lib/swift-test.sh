# Sourced by scripts/test.sh and scripts/test-sanitized.sh: `swift test` with a watchdog.
# Uses SWIFT (default swift), the array SWIFT_TEST_OPTIONS and SWIFT_TEST_SECONDS (how long a
# run may take before its summary, default 1800) of the caller.

# Ends the process PID and every process below it (children first found, then ended parents
# first, so none is re-parented out of reach), by id: never by name, which would also hit the
# tests of another checkout running on the same machine.
kill_tree() { # kill_tree PID
    local pid=$1 child
    local children
    children=$(pgrep -P "$pid" || true)
    kill -STOP "$pid" 2>/dev/null || true
    for child in $children; do
        kill_tree "$child"
    done
    kill -KILL "$pid" 2>/dev/null || true
}

# `swift test` with a watchdog for one thing only: on this Linux toolchain the test process
# sometimes stays alive after printing its final "Test run with N tests ... passed/failed" line
# (its main thread parked by libdispatch, nothing left running; seen about once in five runs,
# with every test finished). Once that line is printed the process gets 60 s to exit; if it
# has not, it is killed and the step's status is what the line says. Anything else — a test
# that hangs before the summary — still fails the step through the step's own time limit.
swift_test() {
    local log
    log=$(mktemp)
    # stdbuf: `swift test` forwards the test process's output through a block buffer, so the
    # summary of a run whose process then stays alive would never reach the log (and the
    # watchdog below); line-buffered, each line arrives when it is printed.
    (set -o pipefail; stdbuf -oL -eL "${SWIFT:-swift}" test "${SWIFT_TEST_OPTIONS[@]}" "$@" 2>&1 | tee "$log") &
    local pipeline=$!
    local deadline=$((SECONDS + ${SWIFT_TEST_SECONDS:-1800})) summary_at=0
    while kill -0 "$pipeline" 2>/dev/null; do
        if [ "$summary_at" -eq 0 ] && grep -qE "Test run with [0-9]+ tests? in [0-9]+ suites? (passed|failed)" "$log"; then
            summary_at=$SECONDS
        fi
        if { [ "$summary_at" -gt 0 ] && [ $((SECONDS - summary_at)) -gt 60 ]; } || [ "$SECONDS" -gt "$deadline" ]; then
            echo "swift test: the test process did not exit after its summary; stopping it"
            kill_tree "$pipeline"
            break
        fi
        sleep 1
    done
    local status=0
    wait "$pipeline" || status=$?
    if [ "$summary_at" -gt 0 ] && [ "$status" -ne 0 ] && ! grep -qE "Test run with [0-9]+ tests? in [0-9]+ suites? failed" "$log" \
        && grep -qE "Test run with [0-9]+ tests? in [0-9]+ suites? passed" "$log"; then
        status=0
    fi
    rm -f "$log"
    return "$status"
}
