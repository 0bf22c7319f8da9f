#!/usr/bin/env bash
# Fuzzes a live state-server against its own OpenAPI description (GET /openapi.json) with
# schemathesis: no 5xx, and every status, content type, header and body as the spec says.
#
#   scripts/schemathesis.sh            # after `swift build`
#
# Builds nothing: runs .build/debug/state-server (or $STATE_SERVER_BIN) on a free port of
# 127.0.0.1, creates two sessions with curl (one for every session route, one for
# DELETE /v1/sessions/{id}), runs schemathesis with their tokens as Authorization headers,
# stops the server, and exits non-zero when schemathesis reports a failure or the server died.
#
# Environment:
#   STATE_SERVER_BIN            the binary (default .build/debug/state-server)
#   SCHEMATHESIS_MAX_EXAMPLES   test cases per operation and phase (default 30)
#   SCHEMATHESIS_TIMEOUT        hard bound on the schemathesis run, in seconds (default 600)
#   SCHEMATHESIS_SEED           a seed, to replay a run
#   SCHEMATHESIS_STORAGE        the server's --storage (default memory; e.g. sqlite:/tmp/x.db)
#   SCHEMATHESIS_REPORT_DIR     where to write reports, relative to the repository root (default: none)
#   SCHEMATHESIS_REPORT         their formats, e.g. junit,har (default junit)
#   SCHEMATHESIS_FEATURES       the server's feature names, drawn for {feature} and body features
#                               (default "counter todos settings login", the example features)
#   SCHEMATHESIS_PUT_FEATURE    the feature whose state PUT bodies are generated for (default counter)
set -euo pipefail

cd "$(dirname "$0")/.."

BIN=${STATE_SERVER_BIN:-.build/debug/state-server}
MAX_EXAMPLES=${SCHEMATHESIS_MAX_EXAMPLES:-30}
TIMEOUT=${SCHEMATHESIS_TIMEOUT:-600}
STORAGE=${SCHEMATHESIS_STORAGE:-memory}
read -r -a FEATURE_NAMES <<<"${SCHEMATHESIS_FEATURES:-counter todos settings login}"
FEATURES_TOML=$(printf '"%s", ' "${FEATURE_NAMES[@]}")
FEATURES_TOML="[${FEATURES_TOML%, }]"
PUT_FEATURE=${SCHEMATHESIS_PUT_FEATURE:-counter}

if [ ! -x "$BIN" ]; then
    echo "schemathesis.sh: $BIN not found or not executable; run 'swift build' first" >&2
    exit 2
fi
for tool in curl python3; do
    command -v "$tool" >/dev/null || { echo "schemathesis.sh: $tool is required" >&2; exit 2; }
done

# schemathesis 4 (its CLI and its config file), in the test tools' virtual environment
# (.cache/venv, made by scripts/python-env.sh; never the system's Python).
PY=$(bash scripts/python-env.sh)
ST=("$PY" -m schemathesis.cli)
echo "$("${ST[@]}" --version)"

WORK=$(mktemp -d)
source scripts/lib/test-server.sh
cleanup() {
    stop_server
    rm -rf "$WORK"
}
trap cleanup EXIT

# A short heartbeat lets the server notice the event streams schemathesis abandons, so the
# 32-streams-per-session limit frees up during the run.
# The admin routes are exercised with an admin token of this run (its SHA-256 configured).
ADMIN_TOKEN="schemathesis-admin-$RANDOM$RANDOM"
export STATE_SERVER_ADMIN_TOKEN_HASH=$(printf %s "$ADMIN_TOKEN" | sha256sum | cut -d' ' -f1)
start_server schemathesis.sh --heartbeat 1 --storage "$STORAGE"
echo "server on $BASE (pid $SERVER_PID, storage $STORAGE)"

field() { python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
SESSION=$(curl -sS --fail -X POST "$BASE/v1/sessions")
ID=$(field id <<<"$SESSION")
TOKEN=$(field token <<<"$SESSION")
DOOMED=$(curl -sS --fail -X POST "$BASE/v1/sessions")
DOOMED_ID=$(field id <<<"$DOOMED")
DOOMED_TOKEN=$(field token <<<"$DOOMED")

# Every {id} is the first session, with its token; DELETE /v1/sessions/{id} gets a session of
# its own (it is deleted by the first call, then answers 404). The event stream is read up to
# its first event (the snapshot) or 2 seconds, whichever comes first.
# Feature names are drawn from the registered ones half of the time, so requests get past
# 404 unknown_feature. A dispatch with a remembered Idempotency-Key is answered with the first
# reply whatever its body (the contract's replay rule), so negative_data_rejection is off there.
# ignored_auth is not run: it expects 401/403 for a wrong token, where the contract answers
# 404 session_not_found on purpose (a caller cannot tell an unknown session from a wrong token).
cat >"$WORK/schemathesis.toml" <<EOF
headers = { Authorization = "Bearer $TOKEN" }
request-timeout = 10.0

[cache]
enabled = false

[checks]
enabled = false
not_a_server_error.enabled = true
status_code_conformance.enabled = true
content_type_conformance.enabled = true
response_headers_conformance.enabled = true
response_schema_conformance.enabled = true
# 412 counts as a rejection too: the contract judges an If-Match that names no usable version
# before it decodes the body of a PUT (docs/API.md, "Order of checks"), so an invalid body with
# such a header is rightly refused with 412, which schemathesis's default list omits. 413 too:
# a body over a route's byte limit (4,096 bytes for a token mint) is refused before it is
# decoded, so a schema-violating body that is also too large is answered 413 payload_too_large.
negative_data_rejection = { enabled = true, expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "412", "413", "415", "422", "428", "429", "5xx"] }
unsupported_method.enabled = true
allow_header_conformance.enabled = true

[dictionaries.features]
values = $FEATURES_TOML

[parameters]
"path.id" = "$ID"
"path.feature" = { dictionary = "features", probability = 0.5 }
"body.feature" = { dictionary = "features", probability = 0.5 }

[[operations]]
include-operation-id = "deleteSession"
headers = { Authorization = "Bearer $DOOMED_TOKEN" }
parameters = { "path.id" = "$DOOMED_ID" }

# A PUT is accepted only when the state fits the feature in the path: the counter's, here, so
# that generated states (one branch of RehydrateRequest's anyOf is CounterState) get through.
[[operations]]
include-operation-id = "rehydrateFeatureState"
parameters = { "path.feature" = "$PUT_FEATURE" }

[[operations]]
include-operation-id = "dispatchAction"
checks = { negative_data_rejection = { enabled = false } }

[[operations]]
include-operation-id = "listSessions"
headers = { Authorization = "Bearer $ADMIN_TOKEN" }

[[operations]]
include-operation-id = "headListSessions"
headers = { Authorization = "Bearer $ADMIN_TOKEN" }

[[operations]]
include-operation-id = "streamEvents"
max-stream-events = 1
request-timeout = 2.0
EOF

ARGS=(
    --config-file "$WORK/schemathesis.toml"
    run "$BASE/openapi.json"
    --url "$BASE"
    --max-examples "$MAX_EXAMPLES"
    --generation-database none
    --no-color
)
if [ -n "${SCHEMATHESIS_SEED:-}" ]; then
    ARGS+=(--seed "$SCHEMATHESIS_SEED")
fi
if [ -n "${SCHEMATHESIS_REPORT_DIR:-}" ]; then
    mkdir -p "$SCHEMATHESIS_REPORT_DIR"
    ARGS+=(--report "${SCHEMATHESIS_REPORT:-junit}" --report-dir "$(cd "$SCHEMATHESIS_REPORT_DIR" && pwd)")
fi

status=0
# From the scratch folder, so hypothesis's .hypothesis/ lands there and not in the repository.
(cd "$WORK" && timeout --kill-after=10 "$TIMEOUT" "${ST[@]}" "${ARGS[@]}") 2>&1 | tee "$WORK/run.log" || status=${PIPESTATUS[0]}
# (A lone "Connection aborted" on HEAD /v1/sessions/{id}/recording, one run in three, was
# libmicrohttpd writing a chunked terminator after a HEAD reply; the server now ends the
# connection after a HEAD on a streamed reply, and a network error fails the step again.)

if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "schemathesis.sh: the server died during the run" >&2
    tail -n 50 "$WORK/stderr" >&2
    status=1
fi
if grep -q 'internal error' "$WORK/stderr"; then
    echo "schemathesis.sh: the server logged internal errors:" >&2
    grep 'internal error' "$WORK/stderr" | head -n 20 >&2
    status=1
fi
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    echo "schemathesis.sh: schemathesis did not finish within ${TIMEOUT}s" >&2
fi
if [ "$status" -ne 0 ]; then
    echo "schemathesis.sh: FAILED (status $status)" >&2
else
    echo "schemathesis.sh: passed"
fi
exit "$status"
