#!/usr/bin/env bash
# The fault-injection suite (tests-faults/, issue 15 item 5): a real PostgreSQL, three real
# nodes, nginx, TCP proxies we control between them; concurrent clients record a history that
# a checker verifies after every fault.
#
#   bash scripts/faults.sh [short|long] [pytest arguments...]
#
#   short  (default; a step of `make test`) the checker's own tests, one test per bug of issue
#          15 and one run of each fault scenario, with bounded load: about 3 minutes
#   long   (`make faults`) more load, more sessions, FAULTS_RUNS (3) runs of each scenario
#
# Environment: STATE_SERVER_BIN (default .build/debug/state-server), FAULTS_RUNS,
# FAULTS_KEEP=1 keeps each cluster's folder (logs), FAULTS_LOG_LEVEL the nodes' log level (warning). Histories go to test-artifacts/faults/.
# Needs Debian's postgresql and nginx-light (the Makefile's deps); Python packages come from
# scripts/requirements-test.txt in .cache/venv (scripts/python-env.sh), never the system's pip.
set -euo pipefail

cd "$(dirname "$0")/.."
mode=short
case "${1:-}" in short|long) mode=$1; shift ;; esac

export STATE_SERVER_BIN="$(realpath -m "${STATE_SERVER_BIN:-.build/debug/state-server}")"
[ -x "$STATE_SERVER_BIN" ] || { echo "faults: no state-server binary at $STATE_SERVER_BIN (swift build, or set STATE_SERVER_BIN)" >&2; exit 1; }
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || { echo "faults: nginx missing (make deps)" >&2; exit 1; }
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { echo "faults: PostgreSQL missing (make deps)" >&2; exit 1; }

# The test user PostgreSQL runs as when we are root, created once before any cluster starts one.
bash scripts/postgres-test-server.sh ensure-user

PY=$(bash scripts/python-env.sh)
export FAULTS_MODE=$mode
mkdir -p test-artifacts/faults
cd tests-faults
# A hard bound on the whole run, so a hang fails the step instead of stalling CI.
limit=$([ "$mode" = long ] && echo 3600 || echo 420)
exec timeout --kill-after=30 "$limit" "$PY" -m pytest -p no:cacheprovider -v -s --durations=0 "$@"
