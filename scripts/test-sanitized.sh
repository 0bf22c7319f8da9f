#!/usr/bin/env bash
# `make test-sanitized`: the Swift tests (`swift test`) under ThreadSanitizer, then under
# AddressSanitizer, each in a build folder of its own (.build-tsan, .build-asan). Tests that start
# the real `state-server` run the binary of the same sanitized build (ServerBinary finds the one
# beside the test bundle), so the server's own threads are checked too.
#
#   bash scripts/test-sanitized.sh
#   SANITIZERS=thread bash scripts/test-sanitized.sh                     # one of them
#   SANITIZED_FILTER=StateStoreTests bash scripts/test-sanitized.sh      # one suite (swift test --filter)
#
# Every process of a run (the test process and each server it starts) writes its sanitizer
# reports to .cache/sanitizers/<sanitizer>/report.<pid> (the sanitizers' log_path), so a report in
# a child server is not lost in its stderr. A run fails when a test fails or any report was
# written; the reports are printed. Suppressions: scripts/sanitizers/*.supp, each entry with why.
# PostgresTests run too, after `scripts/postgres-test-server.sh ensure-user`, as in `make test`.
set -uo pipefail

cd "$(dirname "$0")/.."
SWIFT=${SWIFT:-swift}
SWIFT_TEST_OPTIONS=(--disable-xctest)
[ "${VERBOSE:-0}" = 1 ] || SWIFT_TEST_OPTIONS+=(--quiet)
# A sanitized run is several times slower than a plain one.
SWIFT_TEST_SECONDS=${SWIFT_TEST_SECONDS:-5400}
# shellcheck source=lib/swift-test.sh
source scripts/lib/swift-test.sh

sanitizers=${SANITIZERS:-thread address}
filter=()
[ -z "${SANITIZED_FILTER:-}" ] || filter=(--filter "$SANITIZED_FILTER")

summary=()
failed=0
for sanitizer in $sanitizers; do
    case $sanitizer in
        thread) short=tsan ;;
        address) short=asan ;;
        *) echo "test-sanitized: no sanitizer '$sanitizer' (thread, address)" >&2; exit 2 ;;
    esac
    reports=$PWD/.cache/sanitizers/$short
    rm -rf "$reports"
    mkdir -p "$reports"
    # The same environment for the build and the tests (SwiftPM re-plans when it changes).
    export TSAN_OPTIONS="log_path=$reports/report suppressions=$PWD/scripts/sanitizers/tsan.supp history_size=4 second_deadlock_stack=1"
    # Leaks are not checked: the Swift runtime's and Foundation's caches live for the whole
    # process, so LeakSanitizer reports them at exit whatever the project does.
    export ASAN_OPTIONS="log_path=$reports/report detect_leaks=0 detect_stack_use_after_return=0"
    # The Swift runtime's crash handler reads memory AddressSanitizer guards; the sanitizer's own
    # report is the one wanted.
    export SWIFT_BACKTRACE=enable=no
    started=$SECONDS
    echo
    echo "== $sanitizer: swift build --build-tests --sanitize=$sanitizer --scratch-path .build-$short =="
    status=0
    "$SWIFT" build --build-tests --sanitize="$sanitizer" --scratch-path ".build-$short" || status=$?
    if [ "$status" -eq 0 ]; then
        test_options=(--skip-build --sanitize="$sanitizer" --scratch-path ".build-$short")
        if [ ${#filter[@]} -gt 0 ]; then
            echo "== $sanitizer: swift test ${filter[*]} =="
            swift_test "${test_options[@]}" "${filter[@]}" || status=$?
        else
            echo "== $sanitizer: swift test --skip PostgresTests =="
            swift_test "${test_options[@]}" --skip PostgresTests || status=$?
            bash scripts/postgres-test-server.sh ensure-user
            echo "== $sanitizer: swift test --filter PostgresTests =="
            swift_test "${test_options[@]}" --filter PostgresTests || status=$?
        fi
    fi
    count=$(find "$reports" -type f | wc -l)
    if [ "$count" -gt 0 ]; then
        echo
        echo "== $sanitizer: $count processes wrote reports =="
        for report in "$reports"/*; do
            echo "--- $report"
            cat "$report"
        done
    fi
    if [ "$status" -ne 0 ] || [ "$count" -gt 0 ]; then
        failed=$((failed + 1))
        summary+=("$(printf '%-8s FAILED  (%s s, tests status %s, %s processes with reports in %s)' "$sanitizer" $((SECONDS - started)) "$status" "$count" "${reports#"$PWD"/}")")
    else
        summary+=("$(printf '%-8s passed  (%s s, no report)' "$sanitizer" $((SECONDS - started)))")
    fi
done
echo
echo "== make test-sanitized summary =="
for line in "${summary[@]}"; do echo "  $line"; done
echo "make test-sanitized: $((${#summary[@]} - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]
