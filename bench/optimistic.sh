#!/usr/bin/env bash
# OptimisticStore (StateClient): time from `send` to the predicted state, and from `send` to the
# server's confirmation with 100 ms of round-trip latency added by a TCP proxy
# (Tests/TestSupport/FaultProxy.swift), against the real server binary.
#
#   bash bench/optimistic.sh
#
# Runs Tests/StateClientTests/OptimisticBenchmark.swift (skipped in ordinary test runs) and prints
# its `OPTIMISTICJSON {...}` line. Knobs: OPTIMISTIC_SENDS (2000 sends timed for the prediction),
# OPTIMISTIC_ROUNDS (30 sends confirmed one at a time), OPTIMISTIC_BURST (50 sends at once, time
# until all are confirmed), OPTIMISTIC_LATENCY_MS (100). Debug build, like the tests (the
# prediction runs the feature's reducer in the app's own build). About a minute with a warm build.
set -euo pipefail
cd "$(dirname "$0")/.."
swift build --build-tests >/dev/null
STATESERVER_BENCH=optimistic swift test --skip-build --disable-xctest --filter OptimisticBenchmark 2>&1 |
	tee /dev/stderr | grep '^OPTIMISTICJSON ' || { echo "error: no OPTIMISTICJSON line" >&2; exit 1; }
