#!/usr/bin/env bash
# Examples/CartServer, the package a team copies to serve its own features: builds it (a package
# of its own, depending on this checkout by path), runs its TestStore tests, then runs its binary
# on a free port and checks over HTTP what the package promises (scripts/template/flow.py): the
# command line and subcommands of state-server (not its example login's setting), the exit
# statuses its main takes from the library's CommandFailure, dispatch, state, events with the checkout's
# follow-up and effect, devtools (history), its middleware, and /openapi.json typing the cart:
# schemathesis against it, and clients generated from it that send and read the cart's own types:
# Python (openapi-python-client, no warnings; scripts/template/client_flow.py) and Swift
# (swift-openapi-generator; scripts/openapi-swift-client-check.sh).
#
#   bash scripts/template-check.sh
#
# The package builds in this checkout's .build (--scratch-path): its dependencies are this
# package's, already built by `swift build`, so only the template's own modules compile (20 s
# instead of a second build of everything); the next `swift build` here re-plans (about a minute).
set -euo pipefail

cd "$(dirname "$0")/.."
PACKAGE=Examples/CartServer
SWIFT=${SWIFT:-swift}

SCRATCH=(--package-path "$PACKAGE" --scratch-path .build)
echo "== template: swift build ${SCRATCH[*]} --build-tests =="
"$SWIFT" build "${SCRATCH[@]}" --build-tests
echo "== template: swift test ${SCRATCH[*]} =="
"$SWIFT" test "${SCRATCH[@]}" --skip-build --disable-xctest

BIN=$("$SWIFT" build "${SCRATCH[@]}" --show-bin-path)/CartServer
WORK=$(mktemp -d)
source scripts/lib/test-server.sh
cleanup() {
    stop_server
    rm -rf "$WORK"
}
trap cleanup EXIT

# Subcommands: the same command line as state-server, named after the program.
"$BIN" --help >"$WORK/help"
grep -q '^USAGE: CartServer' "$WORK/help" || { cat "$WORK/help" >&2; echo "template-check.sh: FAILED: --help does not name CartServer" >&2; exit 1; }
grep -q -- '--storage' "$WORK/help" || { echo "template-check.sh: FAILED: --help lacks --storage" >&2; exit 1; }
features=$("$BIN" features)
[ "$(echo "$features" | wc -l)" = 1 ] && echo "$features" | grep -q '"name":"cart"' \
    || { echo "template-check.sh: FAILED: 'CartServer features' printed: $features" >&2; exit 1; }
"$BIN" --print-config --storage memory | grep -q '"storage"' \
    || { echo "template-check.sh: FAILED: --print-config" >&2; exit 1; }
# The example login's setting is state-server's, not the library's.
if "$BIN" --print-config | grep -q 'login.checkDelay' || grep -q 'LOGIN_CHECK_DELAY' "$WORK/help"; then
    echo "template-check.sh: FAILED: CartServer has state-server's login.checkDelay" >&2; exit 1
fi
# The library throws; the package's main reports and exits as state-server does: 64 for a usage
# error (its message and the usage on stderr), 1 for a server that cannot start.
set +e
"$BIN" --storage bogus: --print-config 2>"$WORK/usage.err"; usage=$?
"$BIN" --storage sqlite:/proc/none/cart.db --port 0 2>"$WORK/start.err"; start=$?
set -e
[ "$usage" = 64 ] && grep -q "^Error: setting 'storage' must be" "$WORK/usage.err" && grep -q '^Usage: CartServer' "$WORK/usage.err" \
    || { cat "$WORK/usage.err" >&2; echo "template-check.sh: FAILED: a usage error exited $usage" >&2; exit 1; }
[ "$start" = 1 ] && grep -q 'cannot open storage' "$WORK/start.err" \
    || { cat "$WORK/start.err" >&2; echo "template-check.sh: FAILED: a server that cannot start exited $start" >&2; exit 1; }

start_server template-check.sh --storage memory
port=${BASE##*:}
STATE_SERVER_PORT=$port "$BIN" healthcheck || { echo "template-check.sh: FAILED: healthcheck against the running server" >&2; exit 1; }

PY=$(bash scripts/python-env.sh)
PYTHONDONTWRITEBYTECODE=1 "$PY" scripts/template/flow.py "$BASE" "$WORK/recording.json" "$WORK/cart-state.json"

# The flow's recording replays through the package's reducers offline.
"$BIN" replay "$WORK/recording.json"

# A typed client of the cart from the package's own /openapi.json.
curl -sS --fail "$BASE/openapi.json" -o "$WORK/openapi.json"
echo 'post_hooks: []' >"$WORK/config.yaml"
VENV_BIN=$(dirname "$PY")
if ! (cd "$WORK" && "$VENV_BIN/openapi-python-client" generate --path openapi.json --config config.yaml \
    --meta none --output-path client >generate.log 2>&1) || grep -qi warning "$WORK/generate.log"; then
    cat "$WORK/generate.log" >&2
    echo "template-check.sh: FAILED: openapi-python-client on CartServer's /openapi.json" >&2
    exit 1
fi
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$WORK" "$PY" scripts/template/client_flow.py "$BASE"
stop_server

# A Swift client generated from it (swift-openapi-generator) reads that state and writes a dispatch.
bash scripts/openapi-swift-client-check.sh "$WORK/openapi.json" "$(cat "$WORK/cart-state.json")"

# schemathesis: CartServer against its own description.
STATE_SERVER_BIN=$BIN SCHEMATHESIS_FEATURES=cart SCHEMATHESIS_PUT_FEATURE=cart SCHEMATHESIS_MAX_EXAMPLES=15 \
    bash scripts/schemathesis.sh
echo "template-check.sh: passed"
