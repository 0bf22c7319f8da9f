#!/usr/bin/env python3
"""Creates many sessions fast: many keep-alive connections, each pipelining a few requests.

    mksessions.py --url http://127.0.0.1:PORT --count 100000 --out sessions.txt [--dispatch]
                  [--conns 32] [--depth 8] [--pid SERVER_PID] [--results results.jsonl --name N]

Writes "id token" lines. With --dispatch every new session gets one counter increment (so
each holds a small, non-initial state). With --pid the server's VmRSS is read before and after
(bytes per session = delta / count). Bounded by --timeout seconds.
"""

import argparse
import json
import select
import sys
import time

sys.path.insert(0, __import__("os").path.dirname(__file__))
import rawhttp  # noqa: E402

CREATE = rawhttp.request("POST", "/v1/sessions")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dispatch", action="store_true")
    ap.add_argument("--conns", type=int, default=32)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--pid", type=int)
    ap.add_argument("--timeout", type=float, default=180)
    ap.add_argument("--results")
    ap.add_argument("--name")
    a = ap.parse_args()

    host, port = rawhttp.split_url(a.url)
    rss_before = rawhttp.rss_kib(a.pid) if a.pid else None
    conns = []
    ep = select.epoll()
    for _ in range(min(a.conns, max(1, a.count))):
        s = rawhttp.connect(host, port)
        c = {"sock": s, "parser": rawhttp.ResponseParser(), "inflight": [], "todo": []}
        conns.append(c)
        ep.register(s.fileno(), select.EPOLLIN)
    by_fd = {c["sock"].fileno(): c for c in conns}

    to_create = a.count
    created = []
    dispatched = 0
    errors = []
    start = time.monotonic()
    deadline = start + a.timeout

    def refill(c):
        nonlocal to_create
        batch = []
        while len(c["inflight"]) < a.depth:
            if c["todo"]:
                kind, payload = c["todo"].pop(0)
                c["inflight"].append((kind, payload))
                batch.append(rawhttp.dispatch_request(*payload))
            elif to_create > 0:
                to_create -= 1
                c["inflight"].append(("create", None))
                batch.append(CREATE)
            else:
                break
        if batch:
            c["sock"].sendall(b"".join(batch))

    for c in conns:
        refill(c)
    busy = sum(len(c["inflight"]) for c in conns)
    while busy:
        if time.monotonic() > deadline:
            errors.append(f"timeout after {a.timeout}s")
            break
        for fd, _ in ep.poll(1.0):
            c = by_fd[fd]
            data = c["sock"].recv(262144)
            if not data:
                errors.append("server closed a connection")
                ep.unregister(fd)
                c["inflight"].clear()
                continue
            for status, body in c["parser"].feed(data):
                kind, payload = c["inflight"].pop(0)
                if kind == "create":
                    if status != 201:
                        errors.append(f"create -> {status} {body[:120]!r}")
                        continue
                    o = json.loads(body)
                    created.append((o["id"], o["token"]))
                    if a.dispatch:
                        c["todo"].append(("dispatch", (o["id"], o["token"])))
                else:
                    if status != 200:
                        errors.append(f"dispatch -> {status} {body[:120]!r}")
                    else:
                        dispatched += 1
            if len(errors) > 20:
                break
            refill(c)
        if len(errors) > 20:
            break
        busy = sum(len(c["inflight"]) + len(c["todo"]) for c in conns)
    elapsed = time.monotonic() - start
    for c in conns:
        c["sock"].close()
    with open(a.out, "w") as f:
        for sid, tok in created:
            f.write(f"{sid} {tok}\n")
    time.sleep(0.5)  # let the server settle before reading its RSS
    rss_after = rawhttp.rss_kib(a.pid) if a.pid else None
    rec = {
        "kind": "mksessions", "name": a.name or f"create{a.count}", "count": a.count,
        "created": len(created), "dispatched": dispatched, "seconds": round(elapsed, 3),
        "requests_per_s": round((len(created) + dispatched) / elapsed, 1) if elapsed else None,
        "rss_before_kib": rss_before, "rss_after_kib": rss_after, "errors": errors[:5],
        "error_count": len(errors),
    }
    if rss_before is not None and rss_after is not None and created:
        rec["bytes_per_session"] = round((rss_after - rss_before) * 1024 / len(created), 1)
    rawhttp.emit(a.results, rec)
    sys.exit(1 if errors or len(created) != a.count else 0)


if __name__ == "__main__":
    main()
