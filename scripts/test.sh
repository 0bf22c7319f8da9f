#!/usr/bin/env bash
# `make test`: every test step in order, then a summary of each step (passed, failed, or not
# run) as the last lines of the output. Exits non-zero when any step failed.
#
#   bash scripts/test.sh
#   VERBOSE=1 bash scripts/test.sh    # also every passing test's line (swift test without --quiet)
#
# A step that fails does not stop the later ones (their results are worth having), except the
# build: without it nothing else can run.
set -uo pipefail

cd "$(dirname "$0")/.."
SWIFT=${SWIFT:-swift}
# Every suite is Swift Testing: --disable-xctest spares XCTest's "Executed 0 tests" lines, and
# --quiet leaves the failures and the summary (VERBOSE=1 keeps every passing test's line).
SWIFT_TEST_OPTIONS=(--disable-xctest)
[ "${VERBOSE:-0}" = 1 ] || SWIFT_TEST_OPTIONS+=(--quiet)

names=()
results=()
failed=0
start_all=$SECONDS

step() { # step NAME COMMAND...
    local name=$1
    shift
    echo
    echo "== $name: $* =="
    local started=$SECONDS
    if "$@"; then
        results+=("passed  ($((SECONDS - started)) s)")
    else
        results+=("FAILED  ($((SECONDS - started)) s, status $?)")
        failed=$((failed + 1))
    fi
    names+=("$name")
}

# kill_tree and swift_test (`swift test` with a watchdog for a process that stays alive after
# its summary): scripts/lib/swift-test.sh, shared with scripts/test-sanitized.sh.
# shellcheck source=lib/swift-test.sh
source scripts/lib/swift-test.sh

# README.md and docs/ARCHITECTURE.md name only files and Swift types that exist; the self-test
# first shows that the check reports a missing file and a missing type.
docs_names() {
    python3 scripts/docs-names.py --self-test && python3 scripts/docs-names.py
}

step "build" "$SWIFT" build --build-tests
if [ "$failed" -eq 0 ]; then
    step "docs names" docs_names
    step "swift test" swift_test --skip-build --skip PostgresTests
    export STATE_SERVER_TEST_STORAGE=sqlite
    step "HTTP suite on SQLite" swift_test --skip-build --filter StateServerIntegrationTests
    unset STATE_SERVER_TEST_STORAGE
    # Ten graceful stops of the real binary under CPU load, each with three open streams (issue
    # 24 item 8: a stop could abort in libmicrohttpd); `bash scripts/shutdown-loop.sh N` for more.
    step "stops under load" bash scripts/shutdown-loop.sh 10
    # Several PostgreSQL servers started at once, as the suites below start theirs; on a fresh
    # machine (as root) this is the run that creates their user, stateserver-test (issue 24
    # item 7). ensure-user then makes sure it exists even if that step failed.
    step "PostgreSQL parallel start" bash scripts/postgres-parallel-start.sh
    bash scripts/postgres-test-server.sh ensure-user
    # A throwaway PostgreSQL per suite (scripts/postgres-test-server.sh), in a step of its own.
    step "PostgreSQL storage" swift_test --skip-build --filter PostgresTests
    step "schemathesis" bash scripts/schemathesis.sh
    step "OpenAPI client check" bash scripts/openapi-client-check.sh
    step "httplint" bash scripts/httplint.sh
    # promtool (Prometheus's linter) on the real server's GET /metrics: no problem allowed.
    step "metrics lint" bash scripts/metrics-lint.sh
    step "browser" env STATE_SERVER_BIN=.build/debug/state-server bash scripts/browser-test.sh
    # The fault-injection suite's short form (tests-faults/; `make faults` is the long one).
    step "faults" bash scripts/faults.sh short
    # Examples/CartServer: a package of its own on StateServer (its build, tests, a live run).
    step "template package" bash scripts/template-check.sh
else
    for name in "docs names" "swift test" "HTTP suite on SQLite" "stops under load" "PostgreSQL parallel start" "PostgreSQL storage" "schemathesis" "OpenAPI client check" "httplint" "metrics lint" "browser" "faults" "template package"; do
        names+=("$name")
        results+=("not run (the build failed)")
    done
fi

passed=0
echo
echo "== make test summary ($((SECONDS - start_all)) s) =="
for i in "${!names[@]}"; do
    printf '  %-22s %s\n' "${names[$i]}" "${results[$i]}"
    case ${results[$i]} in passed*) passed=$((passed + 1)) ;; esac
done
echo "make test: $passed passed, $((${#names[@]} - passed)) failed"
[ "$passed" -eq "${#names[@]}" ]
