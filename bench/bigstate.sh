#!/usr/bin/env bash
# Storage that grows with the change: the 500 KB todo-list case (bench/tools/bigstate.py) for two
# builds in the same run, on SQLite and on a throwaway PostgreSQL (fsync on), then durable
# dispatch throughput of both (bench/ab.sh with AB_STORAGE=sqlite).
#
#   bash bench/bigstate.sh BINARY_BEFORE BINARY_AFTER
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] && [ -x "$1" ] && [ -x "$2" ] || { echo "usage: bench/bigstate.sh BINARY_BEFORE BINARY_AFTER" >&2; exit 2; }
TMP=$(mktemp -d /tmp/bigstate.XXXXXX)
chmod 755 "$TMP"
PG="$TMP/pg"
trap 'bash scripts/postgres-test-server.sh destroy "$PG" >/dev/null 2>&1; rm -rf "$TMP"' EXIT
bash scripts/postgres-test-server.sh ensure-user || { echo "no PostgreSQL test user" >&2; exit 1; }
url=$(POSTGRES_SERVER_OPTIONS="-c fsync=on" bash scripts/postgres-test-server.sh start "$PG") || { echo "no PostgreSQL" >&2; exit 1; }
before=$(bash scripts/postgres-test-server.sh createdb "$PG" before)
after=$(bash scripts/postgres-test-server.sh createdb "$PG" after)
echo "== 1,000 todos of 480 bytes, then 40 toggles with Idempotency-Keys; restart; one GET of the list =="
python3 bench/tools/bigstate.py --bin "$1" --bin "$2" --postgres "$before,$after" --json "$TMP/bigstate.jsonl"
echo
echo "== durable dispatch (SQLite, fsync on), A = before, B = after =="
AB_STORAGE=sqlite AB_ROUNDS=${AB_ROUNDS:-3} AB_DURATION=${AB_DURATION:-5} bash bench/ab.sh "$1" "$2"
