#!/usr/bin/env bash
# Several throwaway PostgreSQL servers started at the same time, as the PostgreSQL suites start
# theirs (issue 24 item 7): every start must succeed, and, as root, they must share one test user.
# On a machine where the user `stateserver-test` does not exist yet, this is the run that creates
# it, from N starts racing for it; elsewhere it checks parallel starts only. A step of `make test`,
# before the PostgreSQL suites.
#
#   bash scripts/postgres-parallel-start.sh [N]     N servers (default 4)
set -uo pipefail

cd "$(dirname "$0")/.."
n=${1:-4}
user=stateserver-test
fresh=no
if [ "$(id -u)" = 0 ] && ! id "$user" >/dev/null 2>&1; then fresh=yes; fi

# Not under a 0700 mktemp folder alone: as root the servers run as the test user, who must
# reach their folders.
root=$(mktemp -d "${TMPDIR:-/tmp}/state-server-pg-parallel.XXXXXX")
chmod 755 "$root"
cleanup() {
    local i
    for i in $(seq 1 "$n"); do bash scripts/postgres-test-server.sh destroy "$root/pg$i" >/dev/null 2>&1; done
    rm -rf "$root"
}
trap cleanup EXIT

pids=()
for i in $(seq 1 "$n"); do
    (timeout 120 bash scripts/postgres-test-server.sh start "$root/pg$i" --watch $$ >"$root/out$i" 2>"$root/err$i"
     echo $? >"$root/status$i") &
    pids+=($!)
done
wait "${pids[@]}"

ok=0
for i in $(seq 1 "$n"); do
    status=$(cat "$root/status$i" 2>/dev/null || echo "?")
    if [ "$status" = 0 ] && grep -q '^postgres://' "$root/out$i"; then
        ok=$((ok + 1))
    else
        echo "start $i: status $status: $(tail -n 3 "$root/err$i" 2>/dev/null)"
    fi
done
echo "postgres-parallel-start: $ok of $n parallel starts succeeded (user created by this run: $fresh)"
[ "$ok" -eq "$n" ] || exit 1
if [ "$(id -u)" = 0 ]; then
    id "$user" >/dev/null 2>&1 || { echo "postgres-parallel-start: the user $user does not exist afterwards"; exit 1; }
fi
