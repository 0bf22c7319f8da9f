#!/usr/bin/env python3
"""Gives sessions a todo list of a known size, for a durable dispatch bench on a state that is
not tiny (where a journal of changes writes a patch, not the list).

    filltodos.py --url http://127.0.0.1:PORT --sessions sessions.txt --count 100 --items 100
                 --title-bytes 200 --out todos.txt

Takes the first --count sessions of the "id token" file, adds --items todos to each (titles of
--title-bytes characters), and writes "id token todo-id" lines (the first item's id) for
bench/wrk/sessions.lua's "toggle" mode. One keep-alive connection, 127.0.0.1 only.
"""

import argparse
import json
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
import rawhttp  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--sessions", required=True)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--items", type=int, default=100)
    ap.add_argument("--title-bytes", type=int, default=200)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    host, port = rawhttp.split_url(a.url)
    sock = rawhttp.connect(host, port)
    parser = rawhttp.ResponseParser()
    lines = []
    for sid, token in rawhttp.read_sessions(a.sessions, a.count):
        auth = {"Authorization": f"Bearer {token}"}
        first = None
        for n in range(a.items):
            title = (f"item {n} " + "x" * a.title_bytes)[: a.title_bytes]
            body = json.dumps({"feature": "todos", "action": {"type": "add", "title": title}})
            status, reply = rawhttp.roundtrip(sock, parser, rawhttp.request("POST", f"/v1/sessions/{sid}/dispatch", auth, body))
            if status != 200:
                raise SystemExit(f"filltodos: add answered {status}: {reply[:200]!r}")
            if first is None:
                first = json.loads(reply)["state"]["items"][0]["id"]
        lines.append(f"{sid} {token} {first}\n")
    with open(a.out, "w") as f:
        f.writelines(lines)


if __name__ == "__main__":
    main()
