#!/usr/bin/env python3
"""Counter dispatches on every session of a file (`--rounds` in a row per session), through one
URL (e.g. the cluster's nginx), on a few keep-alive connections at once: afterwards, with nginx
routing by session, each session lives on the node it is routed to (a session moves to the
node its requests keep coming through after 3 forwarded in a row, so `--rounds 4`), the steady
state of that routing, and a measured run that follows does not count the one-time moves.

    warm.py --url http://127.0.0.1:PORT --sessions FILE [--rounds 1] [--conns 8] [--timeout 120]

Prints one line; exit status 1 if any dispatch did not answer 200 or time ran out.
"""

import argparse
import sys
import threading
import time

sys.path.insert(0, __import__("os").path.dirname(__file__))
import rawhttp  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--sessions", required=True)
    ap.add_argument("--conns", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()
    host, port = rawhttp.split_url(a.url)
    sessions = rawhttp.read_sessions(a.sessions)
    deadline = time.monotonic() + a.timeout
    lock = threading.Lock()
    state = {"next": 0, "ok": 0, "bad": [], "late": False}

    def worker():
        sock, parser = rawhttp.connect(host, port), rawhttp.ResponseParser()
        try:
            while True:
                with lock:
                    i = state["next"]
                    state["next"] += 1
                if i >= len(sessions):
                    return
                if time.monotonic() > deadline:
                    state["late"] = True
                    return
                answers = [rawhttp.roundtrip(sock, parser, rawhttp.dispatch_request(*sessions[i]))
                           for _ in range(max(1, a.rounds))]
                with lock:
                    bad = [(status, body) for status, body in answers if status != 200]
                    if not bad:
                        state["ok"] += 1
                    elif len(state["bad"]) < 5:
                        state["bad"].append(f"{bad[0][0]} {bad[0][1][:120]!r}")
        finally:
            sock.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, a.conns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()) + 15)
    print(f"warm-up: {state['ok']}/{len(sessions)} sessions dispatched {a.rounds}x in {time.monotonic() - t0:.1f} s"
          + (f"; not 200: {state['bad']}" if state["bad"] else "") + ("; ran out of time" if state["late"] else ""))
    sys.exit(0 if state["ok"] == len(sessions) else 1)


if __name__ == "__main__":
    main()
