#!/usr/bin/env python3
"""Pending timers at rest (issue 38), the parts `bench/timers.sh` runs. Only 127.0.0.1.

    timers.py populate --url URL --sessions N --items T --out FILE   sessions, T todos each
    timers.py remind   --url URL --sessions-file FILE --items T --after S
                       one {"type":"remind","id":I,"after":S} per item over HTTP; exit 3 when
                       the server's todos feature has no `remind` (nothing was scheduled)
    timers.py rows     --db PATH --items T --after S
                       writes the timers table's rows directly (server stopped): one timer per
                       todo, id "remind-I", action {"type":"toggle","id":I}, due in S seconds
    timers.py measure  --bin BIN --storage SPEC --label L --round R [--settle 5 --idle 20]
                       starts BIN, times exec -> "listening on" -> /readyz 200, reads RSS and
                       CPU at ready, after settling and after the idle window, and /metrics;
                       prints one JSON record (appended to --results)
    timers.py report   --results FILE          medians per label, timers ÷ baseline
"""

import argparse
import json
import os
import select
import signal
import sqlite3
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import rawhttp  # noqa: E402


def pipelined(url, jobs, conns=16, depth=16, timeout=600):
    """Runs `jobs` (a list of per-connection request lists, each [(bytes, tag)]) on `conns`
    keep-alive connections, `depth` requests in flight on each; returns [(tag, status, body)]."""
    host, port = rawhttp.split_url(url)
    ep = select.epoll()
    state = {}
    for queue in jobs:
        if not queue:
            continue
        s = rawhttp.connect(host, port)
        ep.register(s.fileno(), select.EPOLLIN)
        state[s.fileno()] = {"sock": s, "parser": rawhttp.ResponseParser(), "todo": list(reversed(queue)), "inflight": []}
    out = []
    deadline = time.monotonic() + timeout

    def refill(c):
        batch = []
        while c["todo"] and len(c["inflight"]) < depth:
            req, tag = c["todo"].pop()
            c["inflight"].append(tag)
            batch.append(req)
        if batch:
            c["sock"].sendall(b"".join(batch))

    for c in state.values():
        refill(c)
    while any(c["inflight"] for c in state.values()):
        if time.monotonic() > deadline:
            raise SystemExit(f"timers.py: requests still in flight after {timeout} s")
        for fd, _ in ep.poll(1.0):
            c = state[fd]
            data = c["sock"].recv(262144)
            if not data:
                raise SystemExit("timers.py: the server closed a connection")
            for status, body in c["parser"].feed(data):
                out.append((c["inflight"].pop(0), status, body))
            refill(c)
    for c in state.values():
        c["sock"].close()
    return out


def dispatch(sid, token, action):
    body = json.dumps({"feature": "todos", "action": action}, separators=(",", ":"))
    return rawhttp.request("POST", f"/v1/sessions/{sid}/dispatch", {"Authorization": f"Bearer {token}"}, body)


def populate(a):
    start = time.monotonic()
    n_conns = min(a.conns, a.sessions)
    create = rawhttp.request("POST", "/v1/sessions")
    created = []
    for tag, status, body in pipelined(a.url, [[(create, i)] * ((a.sessions - i + n_conns - 1) // n_conns)
                                               for i in range(n_conns)], n_conns, a.depth):
        if status != 201:
            raise SystemExit(f"timers.py: create -> {status} {body[:200]!r}")
        o = json.loads(body)
        created.append((o["id"], o["token"]))
    created_s = time.monotonic() - start
    jobs = [[] for _ in range(n_conns)]
    add = {"type": "add", "title": "x"}
    for i, (sid, token) in enumerate(created):
        # A session's adds on one connection, so they apply in order (ids "1", "2", ...).
        jobs[i % n_conns] += [(dispatch(sid, token, add), sid)] * a.items
    bad = [(s, b[:200]) for _, s, b in pipelined(a.url, jobs, n_conns, a.depth) if s != 200]
    if bad:
        raise SystemExit(f"timers.py: {len(bad)} adds failed, first: {bad[0]}")
    with open(a.out, "w") as f:
        for sid, token in created:
            f.write(f"{sid} {token}\n")
    print(json.dumps({"sessions": len(created), "adds": len(created) * a.items,
                      "create_s": round(created_s, 1), "seconds": round(time.monotonic() - start, 1)}))


def remind(a):
    sessions = rawhttp.read_sessions(a.sessions_file)
    start = time.monotonic()
    # One probe first: a server without `remind` answers 400 and nothing is scheduled.
    sid, token = sessions[0]
    probe = pipelined(a.url, [[(dispatch(sid, token, {"type": "remind", "id": "1", "after": a.after}), 0)]])
    if probe[0][1] != 200:
        print(json.dumps({"remind": False, "status": probe[0][1], "body": probe[0][2][:200].decode(errors="replace")}))
        sys.exit(3)
    jobs = [[] for _ in range(a.conns)]
    for i, (sid, token) in enumerate(sessions):
        first = 2 if i == 0 else 1
        jobs[i % a.conns] += [(dispatch(sid, token, {"type": "remind", "id": str(k), "after": a.after}), sid)
                              for k in range(first, a.items + 1)]
    bad = [(s, b[:200]) for _, s, b in pipelined(a.url, jobs, a.conns, a.depth) if s != 200]
    if bad:
        raise SystemExit(f"timers.py: {len(bad)} reminds failed, first: {bad[0]}")
    print(json.dumps({"remind": True, "timers": len(sessions) * a.items, "seconds": round(time.monotonic() - start, 1)}))


def rows(a):
    start = time.monotonic()
    db = sqlite3.connect(a.db)
    # The server's own tagged form of a todos action, from a stored `add`.
    sample = db.execute("SELECT action FROM changes WHERE feature = 'todos' AND cause = 'dispatch' "
                        "UNION ALL SELECT action FROM recent_changes WHERE feature = 'todos' AND cause = 'dispatch' LIMIT 1").fetchone()
    if not sample or json.loads(bytes(sample[0])) != {"type": "add", "title": "x"}:
        raise SystemExit(f"timers.py: a stored todos action is {sample!r}, not {{\"type\":\"add\",\"title\":\"x\"}}")
    now = int(time.time() * 1000)
    due = now + a.after * 1000
    sessions = [r[0] for r in db.execute("SELECT id FROM sessions")]

    def timer_rows():
        for sid in sessions:
            for k in range(1, a.items + 1):
                action = json.dumps({"type": "toggle", "id": str(k)}, separators=(",", ":")).encode()
                # Due times spread over a second, as timers created one after another would be.
                yield (sid, "todos", f"remind-{k}", action, action, due + (k % 1000), now)

    with db:
        db.executemany("INSERT INTO timers (session, feature, id, action, public_action, due, scheduled_at) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?)", timer_rows())
    count = db.execute("SELECT count(*) FROM timers").fetchone()[0]
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    print(json.dumps({"rows": count, "sessions": len(sessions), "seconds": round(time.monotonic() - start, 1)}))


def metrics(port):
    s = rawhttp.connect("127.0.0.1", port)
    status, body = rawhttp.roundtrip(s, rawhttp.ResponseParser(), rawhttp.request("GET", "/metrics"))
    s.close()
    out = {}
    for line in body.decode().splitlines():
        parts = line.split()
        if len(parts) == 2 and not line.startswith("#"):
            out[parts[0]] = float(parts[1])
    return out


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pg_sql(a, statement):
    out = subprocess.run(["bash", os.path.join(ROOT, "scripts", "postgres-test-server.sh"), "sql", a.pg_dir, a.pg_db,
                          statement], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise SystemExit(f"timers.py: psql failed: {out.stderr.strip()}")
    return out.stdout


def pg_cpu(pg_dir):
    """CPU seconds of a PostgreSQL cluster: its postmaster and every live child."""
    with open(os.path.join(pg_dir, "data", "postmaster.pid")) as f:
        pm = int(f.readline())
    total = rawhttp.cpu_seconds(pm)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pm:
                        total += rawhttp.cpu_seconds(int(entry))
            except (OSError, ValueError):
                pass
    return total


def measure(a):
    env = dict(os.environ)
    started = time.monotonic()
    p = subprocess.Popen([a.bin, "--port", "0", "--storage", a.storage], stdout=subprocess.PIPE,
                         stderr=open(a.stderr, "ab") if a.stderr else subprocess.DEVNULL, env=env)
    try:
        port = None
        line = b""
        deadline = started + 120
        while port is None:
            if time.monotonic() > deadline or p.poll() is not None:
                raise SystemExit(f"timers.py: {a.label} did not start (exit {p.poll()})")
            line = p.stdout.readline()
            if line.startswith(b"listening on http://127.0.0.1:"):
                port = int(line.split(b":")[2].split(b"/")[0])
        listening_s = time.monotonic() - started
        host = ("127.0.0.1", port)
        ready = rawhttp.request("GET", "/readyz")
        while True:
            try:
                s = rawhttp.connect(*host)
                status, _ = rawhttp.roundtrip(s, rawhttp.ResponseParser(), ready, timeout=5)
                s.close()
                if status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"timers.py: {a.label}: /readyz not 200 within 120 s")
            time.sleep(0.002)
        ready_s = time.monotonic() - started
        rss_ready = rawhttp.rss_kib(p.pid)
        cpu_ready = rawhttp.cpu_seconds(p.pid)
        made = {}
        if a.populate:
            # Memory storage: nothing survives a restart, so the sessions (and the timers) are
            # made in this process after it is ready; "settled" is then after making them.
            url = f"http://127.0.0.1:{port}"
            t0 = time.monotonic()
            populate(argparse.Namespace(url=url, sessions=a.populate, items=a.items, out=a.sessions_out,
                                        conns=16, depth=16))
            made["populate_s"] = round(time.monotonic() - t0, 1)
            if a.remind_after:
                t0 = time.monotonic()
                remind(argparse.Namespace(url=url, sessions_file=a.sessions_out, items=a.items,
                                          after=a.remind_after, conns=16, depth=16))
                made["remind_s"] = round(time.monotonic() - t0, 1)
            cpu_ready = rawhttp.cpu_seconds(p.pid)
        time.sleep(a.settle)
        rss_settled = rawhttp.rss_kib(p.pid)
        if a.pg_dir:
            pg_sql(a, "SELECT pg_stat_statements_reset()")
            pg0 = pg_cpu(a.pg_dir)
        cpu0 = rawhttp.cpu_seconds(p.pid)
        time.sleep(a.idle)
        cpu1 = rawhttp.cpu_seconds(p.pid)
        if a.pg_dir:
            pg1 = pg_cpu(a.pg_dir)
            # The statements on the timers table meanwhile: calls and execution time.
            rows = pg_sql(a, "SELECT coalesce(sum(calls), 0), coalesce(sum(total_exec_time), 0) FROM pg_stat_statements "
                             "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                             "AND query LIKE '%state_timers%' AND query NOT LIKE '%pg_stat%'")
            calls, ms = rows.strip().split("|")
            by = pg_sql(a, "SELECT calls, round(total_exec_time::numeric, 2), left(regexp_replace(query, '\\s+', ' ', 'g'), 60) "
                           "FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                           "AND query LIKE '%state_timers%' AND query NOT LIKE '%pg_stat%' ORDER BY total_exec_time DESC")
            made["pg_timer_by_statement"] = [line.split("|", 2) for line in by.strip().splitlines()]
            made["pg_idle_cpu_s"] = round(pg1 - pg0, 3)
            made["pg_timer_statements"] = int(calls)
            made["pg_timer_statement_ms"] = round(float(ms), 1)
        rss_idle = rawhttp.rss_kib(p.pid)
        with open(f"/proc/{p.pid}/status") as f:
            # Anonymous memory (the heap: what the server holds) apart from file pages (the
            # binary, its libraries, SQLite's memory-mapped database).
            for line in f:
                if line.startswith(("RssAnon:", "RssFile:")):
                    made[line.split(":")[0].lower().replace("rss", "rss_") + "_kib"] = int(line.split()[1])
        m = metrics(port)
        rec = {
            "label": a.label, "round": a.round, "listening_s": round(listening_s, 4), "ready_s": round(ready_s, 4),
            "cpu_to_ready_s": round(cpu_ready, 3), "cpu_settle_s": round(cpu0 - cpu_ready, 3),
            "idle_window_s": a.idle, "idle_cpu_s": round(cpu1 - cpu0, 3),
            "rss_ready_kib": rss_ready, "rss_settled_kib": rss_settled, "rss_idle_kib": rss_idle,
            "timers_pending": m.get("stateserver_timers_pending"),
            "timers_fired": m.get("stateserver_timers_fired_total", 0.0),
            "sessions_in_memory": m.get("stateserver_sessions_in_memory"),
            "stores_in_memory": m.get("stateserver_stores_in_memory"),
            "load": open("/proc/loadavg").read().split()[0],
            **made,
        }
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    rawhttp.emit(a.results, rec)


def report(a):
    recs = [json.loads(l) for l in open(a.results) if l.strip()]
    labels = []
    for r in recs:
        if r.get("label") and r["label"] not in labels:
            labels.append(r["label"])
    keys = [("ready_s", "exec → /readyz 200 (s)", 3), ("listening_s", "exec → listening (s)", 3),
            ("cpu_to_ready_s", "CPU until ready (s)", 3), ("rss_ready_kib", "RSS at ready (KiB)", 0),
            ("rss_settled_kib", "RSS after settling (KiB)", 0), ("rss_idle_kib", "RSS after the idle window (KiB)", 0),
            ("rss_anon_kib", "of which anonymous (RssAnon, KiB)", 0), ("rss_file_kib", "of which file pages (RssFile, KiB)", 0),
            ("idle_cpu_s", "CPU in the idle window (s)", 3), ("pg_idle_cpu_s", "PostgreSQL's CPU in the idle window (s)", 3),
            ("pg_timer_statements", "statements on state_timers in the idle window", 0),
            ("pg_timer_statement_ms", "their execution time (ms, pg_stat_statements)", 1), ("timers_pending", "stateserver_timers_pending", 0),
            ("timers_fired", "stateserver_timers_fired_total", 0),
            ("sessions_in_memory", "stateserver_sessions_in_memory", 0), ("stores_in_memory", "stateserver_stores_in_memory", 0)]
    med = {l: {} for l in labels}
    for l in labels:
        rs = [r for r in recs if r.get("label") == l]
        for k, _, _ in keys:
            vals = [r[k] for r in rs if r.get(k) is not None]
            med[l][k] = (statistics.median(vals), vals) if vals else (None, [])
    for pair in a.pairs.split(","):
        base, timers = pair.split(":")
        if base not in med or timers not in med:
            continue
        print(f"\n| {base} vs {timers} (median of runs) | baseline: no timers | {a.timers_label} | ratio | each run, baseline / timers |")
        print("| --- | --- | --- | --- | --- |")
        for k, name, digits in keys:
            b, bv = med[base][k]
            t, tv = med[timers][k]
            if b is None or t is None:
                continue
            fmt = (lambda v: f"{v:,.{digits}f}")
            ratio = f"{t / b:.2f}×" if b else "—"
            runs = " ".join(fmt(v) for v in bv) + " / " + " ".join(fmt(v) for v in tv)
            print(f"| {name} | {fmt(b)} | {fmt(t)} | {ratio} | {runs} |")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("populate")
    p.add_argument("--url", required=True); p.add_argument("--sessions", type=int, required=True)
    p.add_argument("--items", type=int, required=True); p.add_argument("--out", required=True)
    p.add_argument("--conns", type=int, default=16); p.add_argument("--depth", type=int, default=16)
    p = sub.add_parser("remind")
    p.add_argument("--url", required=True); p.add_argument("--sessions-file", required=True)
    p.add_argument("--items", type=int, required=True); p.add_argument("--after", type=int, required=True)
    p.add_argument("--conns", type=int, default=16); p.add_argument("--depth", type=int, default=16)
    p = sub.add_parser("rows")
    p.add_argument("--db", required=True); p.add_argument("--items", type=int, required=True)
    p.add_argument("--after", type=int, required=True)
    p = sub.add_parser("measure")
    p.add_argument("--bin", required=True); p.add_argument("--storage", required=True)
    p.add_argument("--label", required=True); p.add_argument("--round", type=int, default=1)
    p.add_argument("--settle", type=float, default=5); p.add_argument("--idle", type=float, default=20)
    p.add_argument("--results"); p.add_argument("--stderr")
    p.add_argument("--populate", type=int, default=0); p.add_argument("--items", type=int, default=0)
    p.add_argument("--remind-after", type=int, default=0); p.add_argument("--sessions-out")
    p.add_argument("--pg-dir"); p.add_argument("--pg-db")
    p = sub.add_parser("report")
    p.add_argument("--results", required=True)
    p.add_argument("--pairs", default="sqlite-baseline:sqlite-timers,memory-baseline:memory-timers,"
                                      "postgres-baseline:postgres-timers")
    p.add_argument("--timers-label", default="with the timers")
    a = ap.parse_args()
    {"populate": populate, "remind": remind, "rows": rows, "measure": measure, "report": report}[a.cmd](a)


if __name__ == "__main__":
    main()
