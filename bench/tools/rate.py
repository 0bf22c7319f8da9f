#!/usr/bin/env python3
"""Constant-rate HTTP load (wrk2-style; wrk2 is not packaged in Debian 12).

    rate.py --url http://127.0.0.1:PORT --mode state|dispatch|path [--path /healthz]
            [--sessions FILE] --rate 1000 --duration 10 [--conns 16]

Request i is due at start + i/rate. A due request goes out on a free keep-alive connection
(one request in flight per connection); when none is free it waits in a queue. Latency is
measured from the time the request was DUE, not from when it was sent, so a stall is charged
to every request it delays (corrected for coordinated omission, like wrk2). The send lag of
this generator itself (sent - due; epoll wakes with 1 ms granularity) is reported too, and
the same run against nginx gives the floor of the method. The first --warmup seconds are not
recorded.
"""

import argparse
import collections
import select
import sys
import time

sys.path.insert(0, __import__("os").path.dirname(__file__))
import rawhttp  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--mode", choices=["state", "dispatch", "path"], required=True)
    ap.add_argument("--path", default="/healthz")
    ap.add_argument("--sessions")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--rate", type=float, default=1000)
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--name")
    ap.add_argument("--results")
    a = ap.parse_args()

    host, port = rawhttp.split_url(a.url)
    if a.mode == "path":
        reqs = [rawhttp.request("GET", a.path)]
    else:
        sess = rawhttp.read_sessions(a.sessions, a.limit)
        make = rawhttp.state_request if a.mode == "state" else rawhttp.dispatch_request
        reqs = [make(sid, tok) for sid, tok in sess]
    nreq = len(reqs)

    ep = select.epoll()
    conns = {}
    free = collections.deque()  # FIFO: every connection stays busy (servers close idle ones)

    def open_conn():
        s = rawhttp.connect(host, port, blocking=False)
        conns[s.fileno()] = {"sock": s, "parser": rawhttp.ResponseParser(), "due": 0.0, "sent": 0.0}
        ep.register(s.fileno(), select.EPOLLIN)
        free.append(s.fileno())

    for _ in range(a.conns):
        open_conn()
    reconnects = 0

    total = int(a.rate * (a.duration + a.warmup))
    interval = 1.0 / a.rate
    pending = collections.deque()
    lat, svc, lag = [], [], []
    statuses = collections.Counter()
    errors = 0
    i = 0
    done = 0
    start = time.monotonic() + 0.05
    record_from = start + a.warmup
    hard_stop = start + a.duration + a.warmup + 15
    while done < total:
        now = time.monotonic()
        if now > hard_stop:
            break
        while i < total and start + i * interval <= now:
            pending.append(start + i * interval)
            i += 1
        while pending and free:
            fd = free.popleft()
            c = conns[fd]
            c["due"] = pending.popleft()
            c["sent"] = time.monotonic()
            try:
                c["sock"].send(reqs[(i - len(pending)) % nreq])
            except OSError:
                errors += 1
                done += 1
        if pending or i >= total:
            timeout = 0.05
        else:
            timeout = max(0.0, start + i * interval - time.monotonic())
        for fd, _ in ep.poll(timeout):
            c = conns[fd]
            try:
                data = c["sock"].recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:  # the server closed the connection: its request is lost, open another
                if fd in free:
                    free.remove(fd)  # it was idle: nothing lost
                else:
                    errors += 1
                    done += 1
                ep.unregister(fd)
                conns.pop(fd)["sock"].close()
                reconnects += 1
                open_conn()
                continue
            for status, _body in c["parser"].feed(data):
                t = time.monotonic()
                done += 1
                statuses[status] += 1
                if c["due"] >= record_from:
                    lat.append(t - c["due"])
                    svc.append(t - c["sent"])
                    lag.append(c["sent"] - c["due"])
                free.append(fd)
    elapsed = time.monotonic() - start
    for c in conns.values():
        c["sock"].close()
    lat.sort()
    svc.sort()
    lag.sort()

    def us(v):
        return None if v is None else round(v * 1e6)

    p = rawhttp.percentile
    non2xx = sum(n for st, n in statuses.items() if not 200 <= st < 400)
    rec = {
        "kind": "rate", "name": a.name or f"rate-{a.mode}", "mode": a.mode, "target_rps": a.rate,
        "achieved_rps": round(done / elapsed, 1), "sent": i, "completed": done,
        "recorded": len(lat), "conns": a.conns, "duration_s": a.duration,
        "p50_us": us(p(lat, 50)), "p90_us": us(p(lat, 90)), "p99_us": us(p(lat, 99)),
        "p999_us": us(p(lat, 99.9)), "max_us": us(lat[-1] if lat else None),
        "service_p50_us": us(p(svc, 50)), "service_p99_us": us(p(svc, 99)),
        "send_lag_p50_us": us(p(lag, 50)), "send_lag_p99_us": us(p(lag, 99)),
        "non2xx": non2xx, "errors": errors, "reconnects": reconnects, "statuses": {str(k): v for k, v in statuses.items()},
    }
    rawhttp.emit(a.results, rec)
    sys.exit(0 if done == total and not errors else 1)


if __name__ == "__main__":
    main()
