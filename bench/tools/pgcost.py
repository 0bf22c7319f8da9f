#!/usr/bin/env python3
"""What one request costs PostgreSQL: statements (= round trips) per request, counted by
pg_stat_statements on a cluster's database.

    pgcost.py --url http://127.0.0.1:NODE_A [--other-url http://127.0.0.1:NODE_B]
              --pg-dir DIR --db NAME [--count 300] [--sessions 50]
              [--name N --results results.jsonl]

DIR is a scripts/postgres-test-server.sh folder whose server preloads pg_stat_statements
(bench/run.sh starts it so); the tool creates the extension in DB if needed, and its own
sessions on node A (fresh ones: at versions far from a snapshot, which every
persistence.snapshotEvery-th change of a store adds, through BEGIN ... COMMIT). For each scenario
it first warms the sessions up (every node involved has loaded them), then resets the
statistics, sends COUNT requests one after another on keep-alive connections, and reads every
statement's calls from pg_stat_statements:

  dispatch            POST dispatch on node A, round robin over the sessions
  dispatch-key        the same with a fresh Idempotency-Key each
  state               GET state/counter on node A (reads catch up with the journal first)
  alternate           POST dispatch on one session, A and B in turn (--other-url): each node's
                      copy is one change behind when its turn comes

postgres-nio sends every statement as one Parse/Bind/Execute/Sync flight, so a statement is
one round trip between node and PostgreSQL. pg_stat_statements counts only statements that
succeed; one that fails (a commit that lost the race to another node: a unique key) is counted
from the ERROR lines PostgreSQL writes to DIR/server.log meanwhile. Round trips = both.

Around a load run instead (bench/run.sh's cluster runs: every statement any node sends while
wrk runs, whatever the request):

    pgcost.py --pg-dir DIR --db NAME --mark FILE     resets the statistics, keeps the ERROR count in FILE
    pgcost.py --pg-dir DIR --db NAME --since FILE    prints {"statements", "failed", "by_statement"}
                                                     since that --mark, as JSON
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(__file__))
import rawhttp  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "postgres-test-server.sh")


def sql(a, statement):
    out = subprocess.run(["bash", SCRIPT, "sql", a.pg_dir, a.db, statement],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise SystemExit(f"psql failed: {out.stderr.strip()}")
    return out.stdout


def stats(a):
    """Statement calls by normalised text since the last reset."""
    rows = sql(a, "SELECT calls, regexp_replace(query, '\\s+', ' ', 'g') FROM pg_stat_statements "
                  "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                  "AND query NOT LIKE '%pg_stat%'")
    calls = {}
    for line in rows.splitlines():
        count, _, query = line.partition("|")
        if count.strip().isdigit():
            calls[query.strip()] = calls.get(query.strip(), 0) + int(count)
    return calls


def reset(a):
    sql(a, "SELECT pg_stat_statements_reset()")


def failed(a):
    """ERROR lines in the server's log so far (every failed statement writes one)."""
    try:
        with open(os.path.join(a.pg_dir, "server.log"), errors="replace") as f:
            return sum(1 for line in f if "ERROR:" in line)
    except OSError as e:
        raise SystemExit(f"cannot read the PostgreSQL log: {e}")


def short(query):
    """A statement as the report shows it: its first words, parameters as $n."""
    q = re.sub(r"\s+", " ", query).strip()
    if q.upper().startswith("WITH J AS ( INSERT INTO STATE_JOURNAL"):
        return "INSERT INTO state_changes + state_keys (one statement)"
    for prefix in ("INSERT INTO state_changes", "INSERT INTO state_bases", "INSERT INTO state_keys",
                   "INSERT INTO state_sessions", "SELECT pg_notify", "DELETE FROM state_changes"):
        if q.startswith(prefix):
            return prefix
    return q[:90]


class Node:
    def __init__(self, url):
        host, port = rawhttp.split_url(url)
        self.sock = rawhttp.connect(host, port)
        self.parser = rawhttp.ResponseParser()

    def send(self, req):
        return rawhttp.roundtrip(self.sock, self.parser, req)


def dispatch(sid, tok, key=None):
    headers = {"Authorization": f"Bearer {tok}"}
    if key:
        headers["Idempotency-Key"] = key
    return rawhttp.request("POST", f"/v1/sessions/{sid}/dispatch", headers,
                           '{"feature":"counter","action":{"type":"increment"}}')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url")
    ap.add_argument("--other-url")
    ap.add_argument("--sessions", type=int, default=50, help="sessions to create on node A")
    ap.add_argument("--pg-dir", required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--name", default="pgcost")
    ap.add_argument("--results")
    ap.add_argument("--mark", help="reset the statistics, write the ERROR count to this file, exit")
    ap.add_argument("--since", help="print the statements and failures since --mark FILE as JSON, exit")
    a = ap.parse_args()

    if a.mark:
        sql(a, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        with open(a.mark, "w") as f:
            f.write(str(failed(a)))
        reset(a)
        return
    if a.since:
        with open(a.since) as f:
            failed0 = int(f.read().strip() or 0)
        calls = stats(a)
        merged = {}
        for q, c in calls.items():
            merged[short(q)] = merged.get(short(q), 0) + c
        print(json.dumps({"statements": sum(calls.values()), "failed": failed(a) - failed0,
                          "by_statement": sorted(merged.items(), key=lambda r: -r[1])[:12]}))
        return
    if not a.url:
        ap.error("--url is required (unless --mark or --since)")

    sql(a, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    node_a = Node(a.url)
    sessions = []
    for _ in range(a.sessions):
        status, body = node_a.send(rawhttp.request("POST", "/v1/sessions"))
        if status != 201:
            raise SystemExit(f"creating a session: {status} {body[:200]!r}")
        created = json.loads(body)
        sessions.append((created["id"], created["token"]))
    node_b = Node(a.other_url) if a.other_url else None
    errors = []

    def check(status, body, what):
        if status != 200 and len(errors) < 5:
            errors.append(f"{what} -> {status} {body[:160]!r}")

    scenarios = []

    def measure(label, warm, run):
        for step in warm:
            step()
        failed0 = failed(a)
        reset(a)
        t0 = time.monotonic()
        for i in range(a.count):
            run(i)
        seconds = time.monotonic() - t0
        calls = stats(a)
        rollbacks = failed(a) - failed0
        total = sum(calls.values())
        commits = sum(c for q, c in calls.items() if q.upper() == "COMMIT")
        rows = sorted(((short(q), c / a.count) for q, c in calls.items()), key=lambda r: -r[1])
        merged = {}
        for q, per in rows:
            merged[q] = merged.get(q, 0) + per
        scenarios.append({
            "scenario": label, "requests": a.count, "statements_per_request": round(total / a.count, 2),
            "round_trips_per_request": round((total + rollbacks) / a.count, 2),
            "failed_per_request": round(rollbacks / a.count, 2),
            "commits_per_request": round(commits / a.count, 2), "rollbacks_per_request": round(rollbacks / a.count, 2),
            "ms_per_request": round(1000 * seconds / a.count, 3),
            "statements": [[q, round(per, 3)] for q, per in sorted(merged.items(), key=lambda r: -r[1])],
        })
        print(f"   {label:14s} {(total + rollbacks) / a.count:5.2f} round trips per request "
              f"({total / a.count:5.2f} statements counted), "
              f"{commits / a.count:4.2f} BEGIN...COMMIT, {rollbacks / a.count:4.2f} failed (lost races), "
              f"{1000 * seconds / a.count:6.2f} ms each (sequential)")

    def warm_all():
        for sid, tok in sessions:
            check(*node_a.send(dispatch(sid, tok)), "warm-up dispatch")

    measure("dispatch", [warm_all],
            lambda i: check(*node_a.send(dispatch(*sessions[i % len(sessions)])), "dispatch"))
    measure("dispatch-key", [],
            lambda i: check(*node_a.send(dispatch(*sessions[i % len(sessions)], key=uuid.uuid4().hex)), "dispatch with key"))
    measure("state", [],
            lambda i: check(*node_a.send(rawhttp.state_request(*sessions[i % len(sessions)])), "state"))
    if node_b:
        sid, tok = sessions[0]

        def warm_b():
            check(*node_b.send(dispatch(sid, tok)), "warm-up on B")
            check(*node_a.send(dispatch(sid, tok)), "warm-up on A")

        measure("alternate", [warm_b],
                lambda i: check(*(node_a if i % 2 == 0 else node_b).send(dispatch(sid, tok)), "alternate dispatch"))

    rawhttp.emit(a.results, {"kind": "pgcost", "name": a.name, "scenarios": scenarios,
                             "errors": errors, "error_count": len(errors)})
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
