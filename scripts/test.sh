#!/usr/bin/env bash
# `make test`: every test step in order, then a summary of each step (passed, failed, or not
# run) as the last lines of the output. Exits non-zero when any step failed.
#
#   bash scripts/test.sh
#
# A step that fails does not stop the later ones (their results are worth having), except the
# build: without it nothing else can run.
set -uo pipefail

cd "$(dirname "$0")/.."
SWIFT=${SWIFT:-swift}

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

step "build" "$SWIFT" build --build-tests
if [ "$failed" -eq 0 ]; then
    step "swift test" "$SWIFT" test --skip-build --skip PostgresTests
    step "HTTP suite on SQLite" env STATE_SERVER_TEST_STORAGE=sqlite "$SWIFT" test --skip-build --filter StateServerIntegrationTests
    # A throwaway PostgreSQL per suite (scripts/postgres-test-server.sh), in a step of its own.
    step "PostgreSQL storage" "$SWIFT" test --skip-build --filter PostgresTests
    step "schemathesis" bash scripts/schemathesis.sh
    step "OpenAPI client check" bash scripts/openapi-client-check.sh
    step "browser" env STATE_SERVER_BIN=.build/debug/state-server bash scripts/browser-test.sh
else
    for name in "swift test" "HTTP suite on SQLite" "PostgreSQL storage" "schemathesis" "OpenAPI client check" "browser"; do
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
