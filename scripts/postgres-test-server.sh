#!/usr/bin/env bash
# A throwaway PostgreSQL for tests and local runs, on 127.0.0.1 and a free port.
#
#   postgres-test-server.sh start DIR [--watch PID]   create (initdb) if new, start, wait until
#                                                     ready, print the database URL on stdout;
#                                                     with --watch, destroy DIR once PID exits
#   postgres-test-server.sh stop DIR                  stop the server, keep its files (start again later)
#   postgres-test-server.sh destroy DIR               stop the server and remove DIR
#   postgres-test-server.sh createdb DIR NAME        create another database; print its URL
#   postgres-test-server.sh sql DIR DB STATEMENT      run one statement as the owner (tests)
#   postgres-test-server.sh run                       start in a temporary folder, print the URL,
#                                                     and destroy it on Ctrl-C
#   postgres-test-server.sh ensure-user               as root, create the user below if missing
#                                                     (callers that start several servers at once
#                                                     run it first; `start` also does, under a lock)
#
# PostgreSQL refuses to run as root: as root, the server runs as the system user
# `stateserver-test` (created if missing). Binaries: $PG_BIN, else the newest
# /usr/lib/postgresql/*/bin (Debian's `postgresql` package). The server runs with fsync off
# (throwaway data); $POSTGRES_SERVER_OPTIONS adds server options after the defaults, which they
# override (bench/run.sh: "-c fsync=on -c shared_preload_libraries=pg_stat_statements").
set -euo pipefail

# Close every inherited descriptor but stdin/out/err: the server and the watcher outlive this
# script, and a caller waiting for our exit (or our output's end) must not wait for them.
for fd in $(ls /proc/$$/fd 2>/dev/null); do
    case $fd in 0 | 1 | 2 | 255) ;; *) eval "exec $fd>&-" 2>/dev/null || true ;; esac
done

RUN_AS=stateserver-test
DB_USER=stateserver
DB_NAME=stateserver_test

die() { echo "postgres-test-server: $*" >&2; exit 1; }

find_bin() {
    if [ -n "${PG_BIN:-}" ]; then echo "$PG_BIN"; return; fi
    local dir
    dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    [ -n "$dir" ] && [ -x "$dir/initdb" ] ||
        die "PostgreSQL binaries not found (no /usr/lib/postgresql/*/bin/initdb): apt-get install -y --no-install-recommends postgresql"
    echo "$dir"
}

# Runs a command as the unprivileged user when we are root.
as_user() {
    if [ "$(id -u)" = 0 ]; then runuser -u "$RUN_AS" -- "$@"; else "$@"; fi
}

# Creates the user once, however many starts run at the same time (the PostgreSQL suites start
# their servers in parallel): under a machine-wide lock, so one start creates it and the others
# find it, and tolerating "already exists" from a useradd outside the lock. Without the lock two
# useradds raced: one got "already exists", another chowned its folder to a uid that was then
# not the user's, and its initdb could not read the password file (issue 24 item 7).
USER_LOCK=$([ -d /run/lock ] && [ -w /run/lock ] && echo /run/lock || echo /tmp)/stateserver-test-user.lock

ensure_user() {
    [ "$(id -u)" = 0 ] || return 0
    id "$RUN_AS" >/dev/null 2>&1 && return 0
    local out
    out=$(
        exec 9>>"$USER_LOCK"
        flock -w 60 9 || { echo "no lock on $USER_LOCK after 60 s"; exit 1; }
        id "$RUN_AS" >/dev/null 2>&1 && exit 0
        useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$RUN_AS" 2>&1 || true
    ) || die "cannot create the user $RUN_AS: $out"
    id "$RUN_AS" >/dev/null 2>&1 || die "cannot create the user $RUN_AS: $out"
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
    local dir=$1 watch=${2:-}
    local bin; bin=$(find_bin)
    ensure_user
    mkdir -p "$dir"
    if [ ! -f "$dir/data/PG_VERSION" ]; then
        head -c 18 /dev/urandom | base64 | tr -d '/+=' > "$dir/password"
        [ "$(id -u)" = 0 ] && chown -R "$RUN_AS" "$dir"
        chmod 700 "$dir"
        as_user "$bin/initdb" -D "$dir/data" -U "$DB_USER" --pwfile="$dir/password" \
            --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 ||
            die "initdb failed: $(tail -n 5 "$dir/initdb.log")"
    fi
    local port
    if [ -f "$dir/port" ]; then port=$(cat "$dir/port"); else port=$(free_port); echo "$port" > "$dir/port"; fi
    [ "$(id -u)" = 0 ] && chown -R "$RUN_AS" "$dir"
    # -k: the Unix socket in DIR, not /var/run/postgresql. fsync off: a throwaway server (a
    # later -c in POSTGRES_SERVER_OPTIONS wins). Prepared transactions: a test holds a lock in one
    # after psql has gone (PostgresStorageTests.statementTimeout).
    as_user "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -s \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c max_connections=500 -c max_prepared_transactions=8 ${POSTGRES_SERVER_OPTIONS:-}" start ||
        die "pg_ctl start failed: $(tail -n 5 "$dir/server.log" 2>/dev/null)"
    # Wait until it accepts connections, with a deadline.
    local deadline=$((SECONDS + 30))
    until "$bin/pg_isready" -q -h 127.0.0.1 -p "$port"; do
        [ $SECONDS -lt $deadline ] || die "PostgreSQL not ready after 30 s: $(tail -n 5 "$dir/server.log")"
        sleep 0.1
    done
    if ! as_user "$bin/psql" -h "$dir" -p "$port" -U "$DB_USER" -d postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'" | grep -q 1; then
        as_user "$bin/createdb" -h "$dir" -p "$port" -U "$DB_USER" "$DB_NAME"
    fi
    if [ -n "$watch" ]; then
        # Destroys the server when the process that asked for it is gone (even if it crashed).
        nohup bash -c "while kill -0 $watch 2>/dev/null; do sleep 1; done; '$0' destroy '$dir'" \
            >/dev/null 2>&1 </dev/null &
    fi
    echo "postgres://$DB_USER:$(cat "$dir/password")@127.0.0.1:$port/$DB_NAME"
}

stop() {
    local dir=$1
    local bin; bin=$(find_bin)
    if [ -f "$dir/data/postmaster.pid" ]; then
        as_user "$bin/pg_ctl" -D "$dir/data" -s -m fast -w stop || true
    fi
}

case "${1:-}" in
    ensure-user)
        ensure_user
        ;;
    start)
        [ $# -ge 2 ] || die "usage: $0 start DIR [--watch PID]"
        watch=""
        if [ "${3:-}" = "--watch" ]; then watch=${4:?--watch needs a PID}; fi
        start "$2" "$watch"
        ;;
    stop)
        [ $# -ge 2 ] || die "usage: $0 stop DIR"
        stop "$2"
        ;;
    destroy)
        [ $# -ge 2 ] || die "usage: $0 destroy DIR"
        stop "$2"
        rm -rf "$2"
        ;;
    createdb)
        [ $# -ge 3 ] || die "usage: $0 createdb DIR NAME"
        bin=$(find_bin); port=$(cat "$2/port")
        as_user "$bin/createdb" -h "$2" -p "$port" -U "$DB_USER" "$3"
        echo "postgres://$DB_USER:$(cat "$2/password")@127.0.0.1:$port/$3"
        ;;
    sql)
        [ $# -ge 4 ] || die "usage: $0 sql DIR DB STATEMENT"
        bin=$(find_bin); port=$(cat "$2/port")
        as_user "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$2" -p "$port" -U "$DB_USER" -d "$3" -tAc "$4"
        ;;
    run)
        dir=$(mktemp -d "${TMPDIR:-/tmp}/state-server-postgres.XXXXXX")
        trap 'stop "$dir"; rm -rf "$dir"' EXIT
        trap 'exit 0' INT TERM
        start "$dir"
        echo "PostgreSQL running; Ctrl-C stops and removes it" >&2
        while true; do sleep 3600; done
        ;;
    *)
        die "usage: $0 start DIR [--watch PID] | stop DIR | destroy DIR | createdb DIR NAME | sql DIR DB STATEMENT | run | ensure-user"
        ;;
esac
