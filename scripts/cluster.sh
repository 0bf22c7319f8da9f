#!/usr/bin/env bash
# Runs StateServer as a local cluster: PostgreSQL, several state-server nodes and nginx as a
# load balancer in front (deploy/nginx/stateserver.conf.template, by session), all in a
# temporary folder, on free ports. Prints the URL; Ctrl-C (or any exit) stops everything.
#
#   scripts/cluster.sh [--nodes N] [--port PORT] [--storage STORAGE] [--smoke]
#
#   --nodes N        state-server nodes (default 3)
#   --port PORT      nginx's port on 127.0.0.1 (default 8080 when free, else any free port)
#   --storage S      storage of every node instead of the cluster's PostgreSQL, e.g. memory.
#                    Nodes on memory (or each on its own SQLite file) do NOT share sessions:
#                    only for trying the balancer itself. Also CLUSTER_STORAGE=S.
#   --smoke          start, create a session and dispatch through nginx, read it back from
#                    every node, stop (exit status says whether it worked)
#
# Environment: STATE_SERVER_BIN (default .build/release/state-server; `make release` builds it),
# CLUSTER_KEEP=1 keeps the temporary folder (logs) after exit.
# Needs Debian's postgresql and nginx packages; installs them (as root) when missing.
set -euo pipefail

cd "$(dirname "$0")/.."
repo="$(pwd)"

nodes=3
nginx_port=""
storage="${CLUSTER_STORAGE:-}"
smoke=0
while [ $# -gt 0 ]; do
    case "$1" in
        --nodes) nodes="${2:?--nodes needs a number}"; shift 2 ;;
        --port) nginx_port="${2:?--port needs a number}"; shift 2 ;;
        --storage) storage="${2:?--storage needs a value}"; shift 2 ;;
        --smoke) smoke=1; shift ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) echo "cluster.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ "$nodes" =~ ^[1-9][0-9]?$ ]] || { echo "cluster.sh: --nodes must be 1..99" >&2; exit 2; }

say() { printf 'cluster: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

binary="${STATE_SERVER_BIN:-$repo/.build/release/state-server}"
[ -x "$binary" ] || die "no state-server binary at $binary: run 'make release' or set STATE_SERVER_BIN"

# ---- system packages ------------------------------------------------------------------------
need_packages=()
use_postgres=0
[ -z "$storage" ] && use_postgres=1
pg_bin=""
if [ "$use_postgres" = 1 ]; then
    pg_bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
    [ -n "$pg_bin" ] && [ -x "$pg_bin/initdb" ] || need_packages+=(postgresql)
fi
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need_packages+=(nginx-light)
command -v curl >/dev/null 2>&1 || need_packages+=(curl)
if [ ${#need_packages[@]} -gt 0 ]; then
    say "installing ${need_packages[*]}"
    bash scripts/lib/apt-install.sh "${need_packages[@]}"
    pg_bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
fi
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"

# ---- helpers --------------------------------------------------------------------------------
# A TCP port on 127.0.0.1 nobody listens on now.
free_port() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
    else
        local port
        while :; do
            port=$((20000 + RANDOM % 40000))
            (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || { echo "$port"; return; }
        done
    fi
}
port_is_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Polls a command until it succeeds or SECONDS pass.
wait_for() {
    local seconds="$1" what="$2"; shift 2
    local deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || die "$what not ready after ${seconds}s"
        sleep 0.2
    done
}

# ---- temporary folder and cleanup ------------------------------------------------------------
work="$(mktemp -d "${TMPDIR:-/tmp}/stateserver-cluster.XXXXXX")"
chmod 755 "$work"
pids=()
names=()  # by pid: "node 1", "nginx"
pg_running=0
as_pg=()
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    local pid
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    if [ "$pg_running" = 1 ]; then
        "${as_pg[@]}" "$pg_bin/pg_ctl" -D "$work/pg/data" -m fast -w stop >/dev/null 2>&1 || true
    fi
    if [ "${CLUSTER_KEEP:-0}" = 1 ]; then
        say "kept $work"
    else
        rm -rf "$work"
    fi
    say "stopped"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- PostgreSQL -------------------------------------------------------------------------------
if [ "$use_postgres" = 1 ]; then
    [ -n "$pg_bin" ] || die "PostgreSQL binaries not found under /usr/lib/postgresql"
    # PostgreSQL refuses to run as root: as root, run it as nobody.
    if [ "$(id -u)" = 0 ]; then
        as_pg=(runuser -u nobody --)
    fi
    mkdir -p "$work/pg/data" "$work/pg/socket"
    [ "$(id -u)" = 0 ] && chown -R nobody "$work/pg"
    pg_port="$(free_port)"
    pg_password="$(head -c 18 /dev/urandom | base64 | tr '+/' '-_')"
    printf '%s\n' "$pg_password" > "$work/pg/pwfile"
    [ "$(id -u)" = 0 ] && chown nobody "$work/pg/pwfile"
    chmod 600 "$work/pg/pwfile"
    "${as_pg[@]}" "$pg_bin/initdb" -D "$work/pg/data" -U stateserver --pwfile="$work/pg/pwfile" \
        --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 >"$work/pg/initdb.log" 2>&1 \
        || { cat "$work/pg/initdb.log" >&2; die "initdb failed"; }
    rm -f "$work/pg/pwfile"
    "${as_pg[@]}" "$pg_bin/pg_ctl" -D "$work/pg/data" -l "$work/pg/postgres.log" \
        -o "-p $pg_port -k $work/pg/socket -c listen_addresses=127.0.0.1" start >/dev/null
    pg_running=1
    wait_for 30 "PostgreSQL" "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$pg_port"
    "${as_pg[@]}" "$pg_bin/psql" -q -h "$work/pg/socket" -p "$pg_port" -U stateserver -d postgres \
        -c "CREATE DATABASE stateserver" >/dev/null
    storage="postgres://stateserver:$pg_password@127.0.0.1:$pg_port/stateserver"
    say "PostgreSQL on 127.0.0.1:$pg_port (log $work/pg/postgres.log)"
fi

# ---- state-server nodes -----------------------------------------------------------------------
# cluster.secret: the nodes sign the requests they forward to each other with it (required on
# PostgreSQL); a fresh one per run.
cluster_secret="${STATE_SERVER_CLUSTER_SECRET:-$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')}"
node_addresses=()
for i in $(seq 1 "$nodes"); do
    out="$work/node$i.out"
    node_storage="$storage"
    # Per-node SQLite files when asked for "sqlite" alone.
    [ "$storage" = sqlite ] && node_storage="sqlite:$work/node$i/state.db"
    env -u STATE_SERVER_PORT -u STATE_SERVER_HOST -u STATE_SERVER_STORAGE STATE_SERVER_CLUSTER_SECRET="$cluster_secret" \
        "$binary" --host 127.0.0.1 --port 0 --storage "$node_storage" >"$out" 2>"$work/node$i.log" &
    pids+=($!)
    names[$!]="node $i"
    deadline=$((SECONDS + 30))
    until head -n 1 "$out" 2>/dev/null | grep -q '^listening on http://'; do
        if ! kill -0 "${pids[-1]}" 2>/dev/null; then
            cat "$work/node$i.log" >&2
            case "$storage" in
                postgres://*) die "node $i exited: does this binary support PostgreSQL storage yet? (try --storage memory)" ;;
                *) die "node $i exited" ;;
            esac
        fi
        [ $SECONDS -lt $deadline ] || die "node $i printed no address within 30s"
        sleep 0.1
    done
    address="$(head -n 1 "$out" | sed 's|^listening on http://||')"
    node_addresses+=("$address")
    say "node $i on http://$address (log $work/node$i.log)"
done

# ---- nginx ------------------------------------------------------------------------------------
if [ -z "$nginx_port" ]; then
    if port_is_free 8080; then nginx_port=8080; else nginx_port="$(free_port)"; fi
fi
mkdir -p "$work/nginx/logs" "$work/nginx/tmp"
# The internal listener (/metrics, /v1/admin/...) on a free port of its own.
internal_port="$(free_port)"
bash "$repo/deploy/nginx/render.sh" --main --listen "127.0.0.1:$nginx_port" --internal-listen "127.0.0.1:$internal_port" \
    "${node_addresses[@]}" >"$work/nginx/nginx.conf"
"$nginx_bin" -q -t -p "$work/nginx" -c "$work/nginx/nginx.conf" 2>"$work/nginx/test.log" \
    || { cat "$work/nginx/test.log" >&2; die "nginx rejected the configuration"; }
"$nginx_bin" -p "$work/nginx" -c "$work/nginx/nginx.conf" -g 'daemon off;' 2>"$work/nginx/error.log" &
pids+=($!)
names[$!]="nginx"
url="http://127.0.0.1:$nginx_port"
wait_for 15 "nginx" curl -fsS "$url/healthz"

# ---- smoke test or wait -------------------------------------------------------------------------
if [ "$smoke" = 1 ]; then
    session="$(curl -fsS -X POST "$url/v1/sessions")"
    id="$(printf '%s' "$session" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')"
    token="$(printf '%s' "$session" | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')"
    [ -n "$id" ] && [ -n "$token" ] || die "no session from $url: $session"
    if [ "$use_postgres" = 1 ]; then
        # Any node serves any session: dispatch through nginx, read it back from every node.
        curl -fsS -X POST "$url/v1/sessions/$id/dispatch" -H "Authorization: Bearer $token" \
            -H 'Content-Type: application/json' -d '{"feature":"counter","action":{"type":"increment","by":5}}' >/dev/null
        expected='"count":5'
    else
        # Nodes with their own storage: the session is on the one node that created it.
        expected='"count":0'
    fi
    holders=0
    for address in "${node_addresses[@]}"; do
        body="$(curl -sS "http://$address/v1/sessions/$id/state/counter" -H "Authorization: Bearer $token" || true)"
        if printf '%s' "$body" | grep -q "$expected"; then holders=$((holders + 1)); fi
        say "node $address: $body"
    done
    if [ "$use_postgres" = 1 ]; then
        [ "$holders" = "$nodes" ] || die "$((nodes - holders)) node(s) without the change"
    else
        [ "$holders" = 1 ] || die "expected the session on exactly one node, found it on $holders"
    fi
    say "smoke test passed through $url"
    exit 0
fi

echo "StateServer cluster: $url  ($nodes nodes, storage ${storage%%:*}; Ctrl-C stops it)"
# Until Ctrl-C (or SIGTERM), or until any process of the cluster ends by itself. Ctrl-C reaches
# the nodes and nginx too (one process group), so one of them may end before this shell runs
# its trap: the trap only records the request, and the request is what is reported.
# A shell started with SIGINT ignored (in the background of another script) never runs that
# trap: then a node or nginx that ended with status 0 was asked to stop (they stop cleanly on
# SIGINT or SIGTERM, and exit non-zero when they fail).
stop_request=""
trap 'stop_request=SIGINT' INT
trap 'stop_request=SIGTERM' TERM
ended=""
status=0
wait -n -p ended "${pids[@]}" || status=$?
case $stop_request in
    SIGINT) say "stopping on request (Ctrl-C)"; exit 130 ;;
    SIGTERM) say "stopping on request (SIGTERM)"; exit 143 ;;
esac
name=${names[${ended:-0}]:-a process of the cluster}
if [ "$status" -eq 0 ]; then
    say "$name stopped on request (a signal sent to it, such as Ctrl-C); stopping the others"
    exit 0
fi
say "$name ended by itself (status $status; CLUSTER_KEEP=1 keeps the logs in $work); stopping the others"
exit 1
