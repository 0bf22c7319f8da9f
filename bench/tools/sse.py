#!/usr/bin/env python3
"""SSE fan-out latency and idle-stream memory, with raw sockets and one epoll loop.

    sse.py --url http://127.0.0.1:PORT --sessions FILE --n-sessions S --subs K
           [--rounds R] [--hold SECONDS] [--pid SERVER_PID] [--name N --results F]
           [--dispatch-url http://127.0.0.1:OTHER_PORT]
           [--target server|floor|nchan] [--ready snapshot|head] [--publish-event]

Opens K event streams (GET /v1/sessions/{id}/events?feature=counter) on each of S sessions and
waits for every stream's snapshot. Then:
  * with --pid --rss: reads the server's VmRSS before and after (memory per open stream);
  * with --pid: the server's CPU time per round (and while idle);
  * with --hold: keeps the streams idle that long and reads the server's CPU time meanwhile;
  * with --rounds: R rounds of: send one counter dispatch to each of the S sessions (on S
    keep-alive connections, back to back), then wait until every stream has the "state" event.
    Per session, latency = (last of its K subscribers has the event) - (its dispatch was sent).
    Reported: p50/p99/max of that over all rounds and sessions, and of the first subscriber.
The time includes this client reading S*K sockets one after another in Python (a few
microseconds each), so it is an upper bound of the server's own fan-out time.
With --dispatch-url the dispatches go to another server (another node of a cluster on shared
storage) than the streams: the latency is then from a change on one node to its event on another.

The same client drives the fan-out floor (bench/tools/floor.c) and Nchan (bench/nginx/nchan.conf.in)
at 10,000 subscribers (issue 28):
  * --pid takes several pids separated by commas (nginx's master and workers): CPU and RSS are
    their sum;
  * --ready head: a stream counts as open once its response head arrived (Nchan sends no
    `snapshot` event; the server and the floor do, and the default waits for it);
  * --publish-event: each dispatch's body is the `data:` JSON of the `state` event the server
    would send for it (feature, version, cause, action, state, effect), so that a publisher
    (Nchan's nchan_publisher) that sends its body as the event's data sends the same bytes;
  * any 2xx answers a dispatch (Nchan's publisher answers 201);
  * server_cpu_us_per_delivery = server CPU per round / streams (the figure the issue's
    fan-out goal compares with the floor's).
"""

import argparse
import select
import socket
import sys
import time

sys.path.insert(0, __import__("os").path.dirname(__file__))
import rawhttp  # noqa: E402

STATE = b"event: state"
SNAP = b"event: snapshot"


class Sub:
    __slots__ = ("sock", "session", "tail", "states", "snap", "status", "closed")

    def __init__(self, sock, session):
        self.sock = sock
        self.session = session
        self.tail = b""
        self.states = 0
        self.snap = False
        self.status = None
        self.closed = False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--sessions", required=True)
    ap.add_argument("--n-sessions", type=int, default=1)
    ap.add_argument("--subs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=0)
    ap.add_argument("--pause", type=float, default=0.02)
    ap.add_argument("--hold", type=float, default=0)
    ap.add_argument("--pid", help="server pid (or pids, comma-separated: their sum): CPU per round, idle CPU")
    ap.add_argument("--rss", action="store_true",
                    help="also read the server's RSS before/after opening (use on a fresh server only)")
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--name")
    ap.add_argument("--results")
    ap.add_argument("--dispatch-url", help="send the dispatches here (default: --url)")
    ap.add_argument("--target", help="what is measured (server, floor, nchan), stored in the record")
    ap.add_argument("--ready", choices=("snapshot", "head"), default="snapshot",
                    help="a stream is open once its snapshot event arrived (default) or its response head")
    ap.add_argument("--publish-event", action="store_true",
                    help="dispatch body = the data of the state event the server would send")
    a = ap.parse_args()
    pids = [int(x) for x in a.pid.split(",") if x.strip()] if a.pid else []

    def cpu_now():
        return sum(rawhttp.cpu_seconds(p) for p in pids)

    def rss_now():
        vals = [rawhttp.rss_kib(p) for p in pids]
        return None if any(v is None for v in vals) else sum(vals)

    host, port = rawhttp.split_url(a.url)
    dispatch_host, dispatch_port = rawhttp.split_url(a.dispatch_url or a.url)
    sessions = rawhttp.read_sessions(a.sessions, a.n_sessions)
    if len(sessions) < a.n_sessions:
        raise SystemExit(f"need {a.n_sessions} sessions in {a.sessions}, found {len(sessions)}")
    deadline = time.monotonic() + a.timeout
    ep = select.epoll()
    subs = {}
    errors = []
    rec = {"kind": "sse", "name": a.name or f"sse-{a.n_sessions}x{a.subs}",
           "sessions": a.n_sessions, "subs_per_session": a.subs, "streams": a.n_sessions * a.subs}
    if a.target:
        rec["target"] = a.target

    def pump(timeout):
        """Reads whatever is ready; returns the time of this read."""
        events = ep.poll(timeout)
        t = time.monotonic()
        for fd, _ in events:
            s = subs.get(fd)
            if s is None:
                ctl_read(fd)
                continue
            try:
                data = s.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError as e:
                data = b""
                errors.append(f"stream read: {e}")
            if not data:
                if not s.closed:
                    s.closed = True
                    errors.append("server closed an event stream")
                    ep.unregister(fd)
                continue
            if s.status is None:
                s.status = int(data[9:12])
                if s.status != 200:
                    errors.append(f"events -> {s.status} {data[:200]!r}")
                elif a.ready == "head":
                    s.snap = True
            buf = s.tail + data
            if not s.snap and SNAP in buf:
                s.snap = True
            n = buf.count(STATE)
            if n:
                s.states += n
                arrivals.append((t, s))
            s.tail = buf[-(len(STATE) - 1):]
        return t

    # Control connections (one per session) for the dispatches.
    ctl = {}
    ctl_resp = []

    def ctl_read(fd):
        c = ctl[fd]
        data = c["sock"].recv(65536)
        if not data:
            errors.append("server closed a dispatch connection")
            ep.unregister(fd)
            return
        for status, body in c["parser"].feed(data):
            ctl_resp.append(status)
            if not 200 <= status < 300:
                errors.append(f"dispatch -> {status} {body[:200]!r}")

    arrivals = []
    rss0 = rss_now() if pids and a.rss else None
    t_open = time.monotonic()
    plan = [(j, sid, tok) for j, (sid, tok) in enumerate(sessions) for _ in range(a.subs)]
    for b in range(0, len(plan), a.batch):
        batch = []
        for j, sid, tok in plan[b:b + a.batch]:
            try:
                sock = rawhttp.connect(host, port)
                sock.sendall(rawhttp.events_request(sid, tok))
            except OSError as e:
                errors.append(f"connect: {e}")
                break
            sock.setblocking(False)
            s = Sub(sock, j)
            subs[sock.fileno()] = s
            ep.register(sock.fileno(), select.EPOLLIN)
            batch.append(s)
        while any(not s.snap and not s.closed for s in batch) and time.monotonic() < deadline:
            if len(errors) > 10:
                break
            pump(0.5)
        if errors:
            break
    ready = sum(1 for s in subs.values() if s.snap and not s.closed)
    rec["open_seconds"] = round(time.monotonic() - t_open, 2)
    rec["streams_ready"] = ready
    time.sleep(1.0)
    pump(0)
    if pids and a.rss:
        rss1 = rss_now()
        rec.update(rss_before_kib=rss0, rss_after_kib=rss1)
        if rss0 and rss1 and ready:
            rec["bytes_per_stream"] = round((rss1 - rss0) * 1024 / ready, 1)
    if a.hold and pids and not errors:
        c0 = cpu_now()
        t0 = time.monotonic()
        while time.monotonic() - t0 < a.hold:
            pump(0.2)
        rec["idle_cpu_percent"] = round(100 * (cpu_now() - c0) / (time.monotonic() - t0), 2)
        rec["hold_seconds"] = a.hold
        rec["rss_after_hold_kib"] = rss_now()

    lat_last, lat_first, round_wall = [], [], []
    failed_rounds = 0
    if a.rounds and ready == len(plan) and not errors:
        for j, (sid, tok) in enumerate(sessions):
            sock = rawhttp.connect(dispatch_host, dispatch_port)
            sock.setblocking(False)
            ctl[sock.fileno()] = {"sock": sock, "parser": rawhttp.ResponseParser(), "j": j,
                                  "req": rawhttp.dispatch_request(sid, tok)}
            ep.register(sock.fileno(), select.EPOLLIN)
        per_session = [[] for _ in sessions]
        for s in subs.values():
            per_session[s.session].append(s)
        base = {id(s): s.states for s in subs.values()}
        client_cpu0 = time.process_time()
        server_cpu0 = cpu_now() if pids else None
        for r in range(1, a.rounds + 1):
            if time.monotonic() > deadline:
                errors.append("time budget used up")
                break
            arrivals.clear()
            ctl_resp.clear()
            sent = [0.0] * len(sessions)
            first = [None] * len(sessions)
            last = [None] * len(sessions)
            remaining = [a.subs] * len(sessions)
            left = len(sessions)
            if a.publish_event:
                # Round r on a fresh channel: version r, the server's event data for it.
                data = ('{"feature":"counter","version":%d,"cause":"dispatch","action":{"by":1,"type":"increment"},'
                        '"state":{"count":%d},"effect":null}' % (r, r))
                for c in ctl.values():
                    sid, tok = sessions[c["j"]]
                    c["req"] = rawhttp.request("POST", f"/v1/sessions/{sid}/dispatch",
                                               {"Authorization": f"Bearer {tok}"}, data)
            t_start = time.monotonic()
            for c in ctl.values():
                sent[c["j"]] = time.monotonic()
                c["sock"].send(c["req"])
            round_deadline = time.monotonic() + 10
            while (left or len(ctl_resp) < len(ctl)) and time.monotonic() < round_deadline:
                pump(0.5)
                for t, s in arrivals:
                    if s.states - base[id(s)] == r:  # exactly this round's event, first time
                        j = s.session
                        if first[j] is None:
                            first[j] = t
                        remaining[j] -= 1
                        if remaining[j] == 0:
                            last[j] = t
                            left -= 1
                arrivals.clear()
                if len(errors) > 10:
                    break
            if left:
                failed_rounds += 1
                errors.append(f"round {r}: {left} sessions missed the event within 10 s")
                break
            round_wall.append(max(last) - t_start)
            for j in range(len(sessions)):
                lat_last.append(last[j] - sent[j])
                lat_first.append(first[j] - sent[j])
            if a.pause:
                time.sleep(a.pause)
        if round_wall:
            # CPU per round: how much of the latency is this Python client reading sockets, and
            # what one fan-out costs the server (idle between rounds, so nearly all of it is that).
            rec["client_cpu_ms_per_round"] = round(1000 * (time.process_time() - client_cpu0) / len(round_wall), 3)
            if server_cpu0 is not None:
                used = cpu_now() - server_cpu0
                rec["server_cpu_ms_per_round"] = round(1000 * used / len(round_wall), 3)
                # Per delivery: one event written to one stream.
                rec["server_cpu_us_per_delivery"] = round(1e6 * used / len(round_wall) / (a.n_sessions * a.subs), 3)

    for s in subs.values():
        s.sock.close()
    for c in ctl.values():
        c["sock"].close()

    def ms(v):
        return None if v is None else round(v * 1000, 3)

    p = rawhttp.percentile
    if lat_last:
        lat_last.sort()
        lat_first.sort()
        round_wall.sort()
        rec.update(
            rounds=a.rounds, rounds_done=len(round_wall),
            p50_ms=ms(p(lat_last, 50)), p99_ms=ms(p(lat_last, 99)), max_ms=ms(lat_last[-1]),
            first_p50_ms=ms(p(lat_first, 50)), first_p99_ms=ms(p(lat_first, 99)),
            round_p50_ms=ms(p(round_wall, 50)), round_max_ms=ms(round_wall[-1]),
            samples=len(lat_last))
    rec["errors"] = errors[:5]
    rec["error_count"] = len(errors)
    rawhttp.emit(a.results, rec)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
