#!/usr/bin/env python3
"""Storage that grows with the change, not the state: the 500 KB todo-list case.

For each binary given (before and after, measured in the same run): start it on a fresh
database (SQLite file, or a fresh PostgreSQL database), make one session with 1,000 todos of
480-byte titles (about 500 KB of state), then 40 toggles, each with an Idempotency-Key, and
measure what those 40 toggles added to the database. Then restart the server, read the session
once (`GET .../state/todos`, which loads it from storage) and measure what that one read added
to the server's resident memory. Also times the 40 keyed toggles (durable dispatch of a change
to a 500 KB state).

    python3 bench/tools/bigstate.py --bin OLD --bin NEW [--postgres URL] [--json OUT]

Prints one line per binary and storage; `--json` appends one JSON record each. Only 127.0.0.1.
"""
import argparse
import json
import os
import random
import signal
import secrets
import string
import subprocess
import sys
import tempfile
import time
import urllib.request

ITEMS = 1000
TITLE = 480
TOGGLES = 40


def request(base, method, path, body=None, token=None, headers=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.status, resp.read()


def start(binary, storage, extra=()):
    # cluster.secret: a node on PostgreSQL refuses to start without one.
    env = dict(os.environ, STATE_SERVER_CLUSTER_SECRET=secrets.token_hex(32))
    proc = subprocess.Popen(
        [binary, "--port", "0", "--storage", storage, *extra],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    deadline = time.time() + 60
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit(f"{binary} exited before listening (status {proc.poll()})")
        if line.startswith("listening on "):
            return proc, line.split("listening on ", 1)[1].strip()
    proc.kill()
    raise SystemExit("no 'listening on' line within 60 s")


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def rss_kib(pid, field="VmRSS:"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


def sqlite_bytes(path):
    return sum(os.path.getsize(p) for p in (path, path + "-wal", path + "-shm") if os.path.exists(p))


def pg_bytes(url):
    out = subprocess.run(["psql", url, "-Atc", "CHECKPOINT; SELECT pg_database_size(current_database())"],
                         capture_output=True, text=True, check=True).stdout.split()
    return int(out[-1])


def titles(seed):
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits
    # Incompressible-ish titles: random letters, so neither storage compresses them away.
    return ["".join(rng.choice(alphabet) for _ in range(TITLE)) for _ in range(ITEMS)]


def run(binary, label, storage, size):
    proc, base = start(binary, storage)
    try:
        _, body = request(base, "POST", "/v1/sessions")
        created = json.loads(body)
        sid, token = created["id"], created["token"]
        # A small session, loaded first after the restart: what any first load costs (the
        # storage's read connection and caches, code paged in) is not counted to the big one.
        _, body = request(base, "POST", "/v1/sessions")
        small = json.loads(body)
        request(base, "POST", f"/v1/sessions/{small['id']}/dispatch", {"feature": "todos", "action": {"type": "add", "title": "x"}}, small["token"])
        for title in titles(1):
            request(base, "POST", f"/v1/sessions/{sid}/dispatch", {"feature": "todos", "action": {"type": "add", "title": title}}, token)
        _, body = request(base, "GET", f"/v1/sessions/{sid}/state/todos", token=token)
        state_bytes = len(body)  # the reply: {"feature", "version", "state"}, almost all state
        before = size()
        started = time.perf_counter()
        for i in range(TOGGLES):
            request(base, "POST", f"/v1/sessions/{sid}/dispatch",
                    {"feature": "todos", "action": {"type": "toggle", "id": str(1 + i * 7 % ITEMS)}}, token,
                    {"Idempotency-Key": f"toggle-{i}"})
        toggles_s = time.perf_counter() - started
        # A repeat of a key is answered from storage after the restart below.
        grown = size() - before
    finally:
        stop(proc)
    proc, base = start(binary, storage)
    try:
        # Warm up on the small session, then one read loads the big one from storage.
        request(base, "GET", "/healthz")
        for _ in range(3):
            request(base, "GET", f"/v1/sessions/{small['id']}/state/todos", token=small["token"])
        rss0, anon0, file0 = rss_kib(proc.pid), rss_kib(proc.pid, "RssAnon:"), rss_kib(proc.pid, "RssFile:")
        status, body = request(base, "GET", f"/v1/sessions/{sid}/state/todos", token=token)
        rss1, anon1, file1 = rss_kib(proc.pid), rss_kib(proc.pid, "RssAnon:"), rss_kib(proc.pid, "RssFile:")
        loaded = json.loads(body)
        status2, replay = request(base, "POST", f"/v1/sessions/{sid}/dispatch",
                                  {"feature": "todos", "action": {"type": "toggle", "id": "1"}}, token,
                                  {"Idempotency-Key": "toggle-39"})
    finally:
        stop(proc)
    record = {
        "binary": label, "storage": storage.split(":", 1)[0], "state_bytes": state_bytes,
        "toggles_db_bytes": grown, "reload_rss_bytes": (rss1 - rss0) * 1024,
        "reload_anon_bytes": (anon1 - anon0) * 1024, "reload_file_bytes": (file1 - file0) * 1024,
        "toggles_per_s": TOGGLES / toggles_s, "version": loaded["version"],
        "replayed_version": json.loads(replay)["version"],
    }
    return record


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", action="append", required=True, help="a state-server binary (give before, then after)")
    parser.add_argument("--postgres", help="a PostgreSQL URL whose database this run may empty (several: one per binary, comma-separated)")
    parser.add_argument("--json", help="append JSON records here")
    args = parser.parse_args()
    records = []
    pg_urls = args.postgres.split(",") if args.postgres else []
    for index, binary in enumerate(args.bin):
        label = os.path.basename(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(binary))))) or binary
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "state.db")
            records.append(run(binary, label, "sqlite:" + path, lambda: sqlite_bytes(path)))
        if index < len(pg_urls):
            url = pg_urls[index]
            records.append(run(binary, label, url, lambda: pg_bytes(url)))
    for r in records:
        print(f"{r['binary']:>24} {r['storage']:>8}: state {r['state_bytes'] / 1e3:.0f} KB; 40 keyed toggles added "
              f"{r['toggles_db_bytes'] / 1e6:.2f} MB; one reload added {r['reload_rss_bytes'] / 1e6:.1f} MB RSS "
              f"({r['reload_rss_bytes'] / r['state_bytes']:.1f}x the state: {r['reload_anon_bytes'] / 1e6:.1f} MB heap, "
              f"{r['reload_file_bytes'] / 1e6:.1f} MB file pages); {r['toggles_per_s']:.0f} toggles/s; "
              f"version {r['version']}, key replayed at {r['replayed_version']}")
    if args.json:
        with open(args.json, "a") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    sys.exit(main())
