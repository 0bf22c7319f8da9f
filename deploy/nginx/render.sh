#!/usr/bin/env bash
# Renders deploy/nginx/stateserver.conf.template to standard output.
#
#   deploy/nginx/render.sh [--balance hash|round-robin] [--listen ADDR] [--internal-listen ADDR]
#                          [--connections-per-address N] [--access-log PATH] [--main] NODE...
#
#   NODE        host:port of a state-server node (one "server" line each)
#   --balance   hash (the default): every request of a session to the same node, by
#               `hash $stateserver_session consistent` (the session id from the path; requests
#               without one spread by $request_id); round-robin: nginx's default, every request
#               to the next node
#   --listen    what nginx listens on (default 8080; e.g. 127.0.0.1:18080)
#   --internal-listen  the listener of /metrics and the admin routes, which the public one
#               refuses (default 127.0.0.1:8081: never publish it)
#   --connections-per-address  requests in progress per client address (limit_conn; default 100)
#   --access-log  the access log's file (default /var/log/nginx/access.log; logs/access.log,
#               under the prefix, with --main); written without query strings either way
#   --main      wrap it in a complete nginx.conf for a private nginx started as
#                   nginx -p PREFIX -c FILE -g 'daemon off;'
#               (pid, temporary files and the access log under PREFIX, errors to stderr;
#               workers run as nobody when started as root). scripts/cluster.sh and the
#               deployment tests use this form.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
listen=8080
internal_listen=127.0.0.1:8081
connections=100
access_log=""
balance=hash
main=0
nodes=()
while [ $# -gt 0 ]; do
    case "$1" in
        --listen) listen="${2:?--listen needs an address}"; shift 2 ;;
        --internal-listen) internal_listen="${2:?--internal-listen needs an address}"; shift 2 ;;
        --connections-per-address) connections="${2:?--connections-per-address needs a number}"; shift 2 ;;
        --access-log) access_log="${2:?--access-log needs a path}"; shift 2 ;;
        --balance) balance="${2:?--balance needs hash or round-robin}"; shift 2 ;;
        --main) main=1; shift ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        -*) echo "render.sh: unknown option $1" >&2; exit 2 ;;
        *) nodes+=("$1"); shift ;;
    esac
done
case "$balance" in
    hash) keep=@HASH@; drop=@ROUND_ROBIN@ ;;
    round-robin) keep=@ROUND_ROBIN@; drop=@HASH@ ;;
    *) echo "render.sh: --balance is hash or round-robin, not $balance" >&2; exit 2 ;;
esac
if [ ${#nodes[@]} -eq 0 ]; then
    echo "render.sh: give at least one node (host:port)" >&2
    exit 2
fi
for node in "${nodes[@]}"; do
    # host:port, or [v6]:port; nothing nginx would read as more than one token.
    if ! [[ "$node" =~ ^([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):[0-9]+$ ]]; then
        echo "render.sh: not a host:port: $node" >&2
        exit 2
    fi
done
if [ -z "$access_log" ]; then
    if [ "$main" = 1 ]; then access_log=logs/access.log; else access_log=/var/log/nginx/access.log; fi
fi
if ! [[ "$access_log" =~ ^[A-Za-z0-9._/-]+$ ]]; then
    echo "render.sh: not a plain file path: $access_log" >&2
    exit 2
fi
for address in "$listen" "$internal_listen"; do
    if ! [[ "$address" =~ ^([A-Za-z0-9.-]+:|\[[0-9A-Fa-f:.]+\]:)?[0-9]+$ ]]; then
        echo "render.sh: not a listen address: $address" >&2
        exit 2
    fi
done
if ! [[ "$connections" =~ ^[1-9][0-9]{0,6}$ ]]; then
    echo "render.sh: --connections-per-address is a number from 1, not $connections" >&2
    exit 2
fi

body() {
    local node line
    while IFS= read -r line || [ -n "$line" ]; do
        # Lines of the other balancing method go; this method's lose their marker.
        [[ "$line" == "$drop"* ]] && continue
        line="${line#"$keep"}"
        if [[ "$line" == *@NODE@* ]]; then
            for node in "${nodes[@]}"; do printf '%s\n' "${line//@NODE@/$node}"; done
        else
            line="${line//@ACCESS_LOG@/$access_log}"
            line="${line//@INTERNAL_LISTEN@/$internal_listen}"
            line="${line//@CONNECTIONS@/$connections}"
            printf '%s\n' "${line//@LISTEN@/$listen}"
        fi
    done < "$here/stateserver.conf.template"
}

if [ "$main" = 1 ]; then
    [ "$(id -u)" = 0 ] && echo "user nobody nogroup;"
    cat <<'HEAD'
worker_processes 1;
pid nginx.pid;
error_log stderr warn;
events {
    worker_connections 4096;
}
http {
    default_type application/octet-stream;
    client_body_temp_path tmp/body;
    proxy_temp_path tmp/proxy;
    fastcgi_temp_path tmp/fastcgi;
    uwsgi_temp_path tmp/uwsgi;
    scgi_temp_path tmp/scgi;
HEAD
    body | sed 's/^/    /; s/^ *$//'
    echo "}"
else
    body
fi
