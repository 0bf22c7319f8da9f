#!/usr/bin/env python3
"""What delta event streams save: bytes on the wire and fan-out CPU, full vs `?delta=json-patch`.

One phase (bench/deltas.sh runs one per fresh server, alternating full and delta):

    deltas.py --url http://127.0.0.1:PORT --pid SERVER_PID --mode full|delta
              [--subs 100] [--changes 200] [--items 400] [--title 400] [--verify 0]
              [--storage memory] [--round 1] [--results F] [--timeout 240]

  1. makes one session and fills its todo list with --items adds of --title random characters
     (todos allows 500 Unicode scalars per title), one request at a time;
  2. sends --changes changes with no event stream open (the dispatch's own cost: reduce, the
     reply of the whole list, the journal on SQLite), reading the server's CPU time around them;
  3. opens --subs streams on the session's todos feature (`?feature=todos`, plus
     `&delta=json-patch` in delta mode) and waits for every snapshot;
  4. sends --changes more changes, one at a time: each is sent when the previous one's reply
     is in and every stream has its `state` event (no pipelining, so the server's queues hold
     at most one event per stream). The mix, the same in both modes (a seeded RNG): per 20
     changes, 18 toggles of a random item, 1 add of a new --title item, 1 remove of a random
     item, so the list stays at --items;
  5. reads the server's CPU time (utime+stime, /proc/PID/stat) and RSS, then checks every
     stream (--verify N: only the first N) against `GET .../state/todos`: delta streams apply
     each patch with the RFC 6902 applier below (add/remove/replace with array indices; the
     event's baseVersion must be the version held), full streams take their last event's
     state; state and version must equal the GET's. Any difference, a gap, a closed stream or
     a non-200 reply exits with status 1.

Bytes per event are counted per stream after its snapshot: on the wire (what recv() returned:
the HTTP chunk framing included) and of the SSE body (de-chunked). Raw sockets in one epoll
loop, 127.0.0.1 only.

    deltas.py --report RESULTS.jsonl

prints the table of every phase and, per storage, the means of full and delta and their ratio.
"""

import argparse
import json
import random
import re
import select
import statistics
import string
import sys
import time

sys.path.insert(0, __import__("os").path.dirname(__file__))
import rawhttp  # noqa: E402

VERSION = re.compile(rb'"version":(\d+)')


# ------------------------------------------------------------------------------------------
# RFC 6902 (add, remove, replace; test for good measure) on parsed JSON, RFC 6901 pointers.

class PatchError(Exception):
    pass


def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"pointer {path!r} does not start with '/'")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _index(container, token, for_add):
    if token == "-" and for_add:
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise PatchError(f"array index {token!r} is not a number")
    i = int(token)
    if i > len(container) or (i == len(container) and not for_add):
        raise PatchError(f"array index {i} out of range (length {len(container)})")
    return i


def _parent(doc, tokens):
    node = doc
    for t in tokens[:-1]:
        if isinstance(node, list):
            node = node[_index(node, t, False)]
        elif isinstance(node, dict):
            if t not in node:
                raise PatchError(f"no member {t!r}")
            node = node[t]
        else:
            raise PatchError(f"cannot descend into {type(node).__name__}")
    return node


def apply_patch(doc, ops):
    """Applies ops to doc (in place where it can); returns the new document."""
    for op in ops:
        kind, tokens = op.get("op"), _pointer(op.get("path", ""))
        if not tokens:
            if kind in ("add", "replace"):
                doc = op["value"]
                continue
            if kind == "test":
                if doc != op["value"]:
                    raise PatchError("test of the whole document failed")
                continue
            raise PatchError(f"{kind} of the whole document")
        parent, last = _parent(doc, tokens), tokens[-1]
        if kind == "add":
            if isinstance(parent, list):
                parent.insert(_index(parent, last, True), op["value"])
            elif isinstance(parent, dict):
                parent[last] = op["value"]
            else:
                raise PatchError("add into a scalar")
        elif kind == "remove":
            if isinstance(parent, list):
                del parent[_index(parent, last, False)]
            elif isinstance(parent, dict) and last in parent:
                del parent[last]
            else:
                raise PatchError(f"remove of a missing {op['path']!r}")
        elif kind == "replace":
            if isinstance(parent, list):
                parent[_index(parent, last, False)] = op["value"]
            elif isinstance(parent, dict) and last in parent:
                parent[last] = op["value"]
            else:
                raise PatchError(f"replace of a missing {op['path']!r}")
        elif kind == "test":
            value = parent[_index(parent, last, False)] if isinstance(parent, list) else parent.get(last)
            if value != op["value"]:
                raise PatchError(f"test of {op['path']!r} failed")
        else:
            raise PatchError(f"unexpected op {kind!r} (the server writes add, remove, replace)")
    return doc


def _self_test():
    doc = {"items": [{"id": "1", "done": False}, {"id": "2", "done": False}], "nextId": 3, "a/b": {"~": 1}}
    doc = apply_patch(doc, [
        {"op": "replace", "path": "/items/1/done", "value": True},
        {"op": "add", "path": "/items/2", "value": {"id": "3", "done": False}},
        {"op": "add", "path": "/items/-", "value": {"id": "4", "done": True}},
        {"op": "remove", "path": "/items/0"},
        {"op": "replace", "path": "/nextId", "value": 5},
        {"op": "replace", "path": "/a~1b/~0", "value": 2},
    ])
    assert doc == {"items": [{"id": "2", "done": True}, {"id": "3", "done": False}, {"id": "4", "done": True}],
                   "nextId": 5, "a/b": {"~": 2}}, doc
    for bad in ([{"op": "remove", "path": "/items/9"}], [{"op": "replace", "path": "/nope", "value": 1}],
                [{"op": "move", "from": "/a", "path": "/b"}]):
        try:
            apply_patch(doc, bad)
        except PatchError:
            continue
        raise AssertionError(f"{bad} applied")


# ------------------------------------------------------------------------------------------
# One event stream: HTTP head, chunked body, SSE events.

class Stream:
    __slots__ = ("sock", "mode", "verify", "raw", "need", "crlf", "sse", "scan", "head_done", "status",
                 "wire", "body", "wire0", "body0", "snap", "version", "state", "last_data", "events",
                 "patches", "wholes", "pings", "closed", "error")

    def __init__(self, sock, mode, verify):
        self.sock, self.mode, self.verify = sock, mode, verify
        self.raw = bytearray()       # undecoded bytes (HTTP head, chunk framing)
        self.need = 0                # bytes left in the current chunk
        self.crlf = 0                # CRLF bytes still to skip after a chunk
        self.sse = bytearray()       # de-chunked SSE text not yet split into events
        self.scan = 0
        self.head_done = False
        self.status = None
        self.wire = self.body = 0    # bytes received: on the wire / SSE body
        self.wire0 = self.body0 = 0  # the same when the change phase began
        self.snap = False
        self.version = None
        self.state = None
        self.last_data = None
        self.events = self.patches = self.wholes = self.pings = 0
        self.closed = False
        self.error = None

    def feed(self, data):
        self.wire += len(data)
        raw = self.raw
        raw += data
        pos = 0
        if not self.head_done:
            end = raw.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(raw[:end])
            self.status = int(head[9:12])
            if self.status != 200 or b"transfer-encoding: chunked" not in head.lower():
                self.error = f"events -> {head[:200]!r}"
                return
            self.head_done = True
            pos = end + 4
        n = len(raw)
        while pos < n:
            if self.crlf:
                k = min(self.crlf, n - pos)
                pos += k
                self.crlf -= k
            elif self.need:
                k = min(self.need, n - pos)
                self.sse += raw[pos:pos + k]
                self.body += k
                pos += k
                self.need -= k
                if not self.need:
                    self.crlf = 2
            else:
                eol = raw.find(b"\r\n", pos)
                if eol < 0:
                    break
                size = int(bytes(raw[pos:eol]).split(b";")[0], 16)
                pos = eol + 2
                if size == 0:
                    self.error = "the server ended the stream"
                    break
                self.need = size
        del raw[:pos]
        self._events()

    def _events(self):
        buf = self.sse
        start = 0
        while True:
            end = buf.find(b"\n\n", max(start, self.scan))
            if end < 0:
                self.scan = max(start, len(buf) - 1)
                break
            self._event(bytes(buf[start:end]))
            start = end + 2
            self.scan = start
        if start:
            del buf[:start]
            self.scan -= start

    def _event(self, block):
        if block.startswith(b":"):
            self.pings += 1
            return
        kind, data = None, None
        for line in block.split(b"\n", 2):
            if line.startswith(b"event: "):
                kind = line[7:]
            elif line.startswith(b"data: "):
                data = line[6:]
        if kind == b"snapshot":
            snap = json.loads(data)["features"]["todos"]
            self.snap, self.version, self.state = True, snap["version"], snap["state"]
            return
        if kind != b"state":
            self.error = f"unexpected event {block[:120]!r}"
            return
        self.events += 1
        if self.mode == "full":
            # The whole list in every event: keep the last one, read only its version here.
            self.version = int(VERSION.search(data, 0, 200).group(1))
            self.last_data = data
            self.wholes += 1
            return
        event = json.loads(data)
        if "patch" in event:
            self.patches += 1
            if event.get("baseVersion") != self.version:
                self.error = f"patch from version {event.get('baseVersion')} on a stream at {self.version}"
            elif self.verify:
                try:
                    self.state = apply_patch(self.state, event["patch"])
                except (PatchError, KeyError, TypeError) as e:
                    self.error = f"patch to version {event['version']} does not apply: {e}"
        else:
            self.wholes += 1
            self.state = event["state"]
        self.version = event["version"]


# ------------------------------------------------------------------------------------------

def change_plan(rng, ids, next_id, count, title):
    """count changes over a list whose ids are ids (mutated): 18 toggles, 1 add, 1 remove per 20."""
    plan = []
    for i in range(count):
        k = i % 20
        if k == 7:
            plan.append({"type": "add", "title": title(rng)})
            ids.append(str(next_id))
            next_id += 1
        elif k == 17:
            victim = rng.choice(ids)
            ids.remove(victim)
            plan.append({"type": "remove", "id": victim})
        else:
            plan.append({"type": "toggle", "id": rng.choice(ids)})
    return plan, next_id


def run(a):
    host, port = rawhttp.split_url(a.url)
    deadline = time.monotonic() + a.timeout
    alphabet = string.ascii_letters + string.digits

    def title(rng):
        # Random letters: no storage or transport compresses them away.
        return "".join(rng.choice(alphabet) for _ in range(a.title))

    ctl = rawhttp.connect(host, port)
    parser = rawhttp.ResponseParser()

    def call(method, path, body=None, token=None):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        status, reply = rawhttp.roundtrip(ctl, parser, rawhttp.request(
            method, path, headers, json.dumps(body, separators=(",", ":")) if body is not None else b""), 60)
        if status not in (200, 201):
            raise SystemExit(f"{method} {path} -> {status} {reply[:300]!r}")
        return json.loads(reply)

    created = call("POST", "/v1/sessions")
    sid, token = created["id"], created["token"]
    dispatch_path = f"/v1/sessions/{sid}/dispatch"

    def dispatch_bytes(action):
        return rawhttp.request("POST", dispatch_path, {"Authorization": f"Bearer {token}"},
                               json.dumps({"feature": "todos", "action": action}, separators=(",", ":")))

    rng = random.Random(17)
    t0 = time.monotonic()
    for _ in range(a.items):
        call("POST", dispatch_path, {"feature": "todos", "action": {"type": "add", "title": title(rng)}}, token)
    fill_s = time.monotonic() - t0
    ids = [str(i) for i in range(1, a.items + 1)]
    warm, next_id = change_plan(rng, ids, a.items + 1, a.changes, title)
    measured, next_id = change_plan(rng, ids, next_id, a.changes, title)

    # The dispatch alone: the same kind of changes with no stream open.
    cpu0 = rawhttp.cpu_seconds(a.pid)
    for action in warm:
        call("POST", dispatch_path, {"feature": "todos", "action": action}, token)
    alone_ms = 1000 * (rawhttp.cpu_seconds(a.pid) - cpu0) / len(warm)
    state_bytes = len(json.dumps(call("GET", f"/v1/sessions/{sid}/state/todos", token=token)["state"],
                                 separators=(",", ":")))
    rss_before = rawhttp.rss_kib(a.pid)

    # The streams.
    query = "feature=todos" + ("&delta=json-patch" if a.mode == "delta" else "")
    events_req = rawhttp.request("GET", f"/v1/sessions/{sid}/events?{query}",
                                 {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"})
    ep = select.epoll()
    streams = {}
    errors = []
    for i in range(a.subs):
        sock = rawhttp.connect(host, port)
        sock.sendall(events_req)
        sock.setblocking(False)
        streams[sock.fileno()] = Stream(sock, a.mode, a.verify <= 0 or i < a.verify)
        ep.register(sock.fileno(), select.EPOLLIN)
    ctl.setblocking(False)
    ep.register(ctl.fileno(), select.EPOLLIN)
    replies = []

    def pump(timeout):
        for fd, _ in ep.poll(timeout):
            if fd == ctl.fileno():
                try:
                    data = ctl.recv(262144)
                except BlockingIOError:
                    continue
                if not data:
                    raise SystemExit("the server closed the dispatch connection")
                replies.extend(parser.feed(data))
                continue
            s = streams[fd]
            try:
                data = s.sock.recv(262144)
            except BlockingIOError:
                continue
            except OSError as e:
                data, s.error = b"", f"stream read: {e}"
            if not data:
                s.closed = True
                s.error = s.error or "the server closed the stream (cut off as a slow subscriber?)"
                ep.unregister(fd)
                continue
            s.feed(data)

    t_open = time.monotonic()
    while not all(s.snap or s.error for s in streams.values()):
        if time.monotonic() > deadline:
            raise SystemExit("time budget used up while opening the streams")
        pump(0.5)
    open_s = time.monotonic() - t_open
    bad = [s.error for s in streams.values() if s.error]
    if bad:
        raise SystemExit(f"{len(bad)} streams failed to open: {bad[0]}")
    for s in streams.values():
        s.wire0, s.body0 = s.wire, s.body

    # The measured changes.
    latencies = []
    client0 = time.process_time()
    cpu0 = rawhttp.cpu_seconds(a.pid)
    t_changes = time.monotonic()
    for n, action in enumerate(measured):
        replies.clear()
        t_sent = time.monotonic()
        ctl.sendall(dispatch_bytes(action))
        target = None
        waiting = list(streams.values())
        while True:
            if replies and target is None:
                status, reply = replies[0]
                if status != 200:
                    raise SystemExit(f"change {n} ({action}) -> {status} {reply[:300]!r}")
                target = int(VERSION.search(reply, 0, 200).group(1))
            if target is not None:
                waiting = [s for s in waiting if s.version < target and not s.error]
                if not waiting:
                    break
            if time.monotonic() > deadline:
                raise SystemExit(f"time budget used up at change {n}: {len(waiting)} streams without it")
            pump(1.0)
            if any(s.error for s in streams.values()):
                break
        errs = [s.error for s in streams.values() if s.error]
        if errs:
            errors.extend(errs)
            break
        latencies.append(time.monotonic() - t_sent)
    changes_s = time.monotonic() - t_changes
    cpu_s = rawhttp.cpu_seconds(a.pid) - cpu0
    client_s = time.process_time() - client0
    rss_after = rawhttp.rss_kib(a.pid)
    pump(0.2)  # anything late (there should be nothing)

    # Every (verified) stream against the server's own answer.
    ctl.setblocking(True)
    ep.unregister(ctl.fileno())
    final = call("GET", f"/v1/sessions/{sid}/state/todos", token=token)
    checked = 0
    for s in streams.values():
        if s.error or not s.verify:
            continue
        state = s.state if a.mode == "delta" else json.loads(s.last_data)["state"]
        if s.version != final["version"] or state != final["state"]:
            errors.append(f"a stream ended at version {s.version} with a state that "
                          f"{'equals' if state == final['state'] else 'differs from'} the server's "
                          f"(version {final['version']})")
        checked += 1
    for s in streams.values():
        s.sock.close()
    ctl.close()

    done = len(latencies)
    events = sum(s.events for s in streams.values())
    wire = sum(s.wire - s.wire0 for s in streams.values())
    body = sum(s.body - s.body0 for s in streams.values())
    latencies.sort()
    rec = {
        "kind": "deltas", "storage": a.storage, "round": a.round, "mode": a.mode,
        "subs": a.subs, "changes": done, "items": a.items, "title": a.title,
        "state_bytes": state_bytes, "fill_seconds": round(fill_s, 2), "open_seconds": round(open_s, 2),
        "events": events, "patch_events": sum(s.patches for s in streams.values()),
        "whole_events": sum(s.wholes for s in streams.values()),
        "pings": sum(s.pings for s in streams.values()),
        "wire_bytes_per_event": round(wire / events, 1) if events else None,
        "sse_bytes_per_event": round(body / events, 1) if events else None,
        "server_cpu_ms_per_event": round(1000 * cpu_s / done, 3) if done else None,
        "server_cpu_ms_per_change_alone": round(alone_ms, 3),
        "server_cpu_us_per_event_per_sub": round(1e6 * cpu_s / done / a.subs, 2) if done else None,
        "fanout_cpu_us_per_event_per_sub": round((1000 * cpu_s / done - alone_ms) * 1000 / a.subs, 2) if done else None,
        "client_cpu_ms_per_event": round(1000 * client_s / done, 3) if done else None,
        "changes_seconds": round(changes_s, 2),
        "latency_p50_ms": round(1000 * rawhttp.percentile(latencies, 50), 2) if done else None,
        "latency_max_ms": round(1000 * latencies[-1], 2) if done else None,
        "rss_before_streams_kib": rss_before, "rss_end_kib": rss_after,
        "verified_streams": checked, "final_version": final["version"],
        "errors": errors[:5], "error_count": len(errors),
    }
    rawhttp.emit(a.results, rec)
    return 1 if errors or checked == 0 or done < a.changes else 0


# ------------------------------------------------------------------------------------------

def report(path):
    try:
        recs = [json.loads(line) for line in open(path) if line.strip()]
    except OSError:
        recs = []
    recs = [r for r in recs if r.get("kind") == "deltas"]
    if not recs:
        print("no results")
        return 1
    r0 = recs[0]
    print(f"\n{r0['subs']} streams on one session's todos: {r0['items']} items of {r0['title']} characters "
          f"(~{r0['state_bytes'] / 1000:.0f} KB of state), {r0['changes']} changes each phase "
          "(90 % toggles, 5 % adds, 5 % removes), one at a time")
    head = ("storage", "round", "mode", "wire B/event", "SSE B/event", "CPU ms/event", "alone ms",
            "us/event/sub", "fan-out us/ev/sub", "p50 ms", "max ms", "RSS MB", "patch/whole", "verified")
    rows = []
    for r in recs:
        rows.append((r["storage"], str(r["round"]), r["mode"], f"{r['wire_bytes_per_event']:,.0f}",
                     f"{r['sse_bytes_per_event']:,.0f}", f"{r['server_cpu_ms_per_event']:.2f}",
                     f"{r['server_cpu_ms_per_change_alone']:.2f}", f"{r['server_cpu_us_per_event_per_sub']:.1f}",
                     f"{r['fanout_cpu_us_per_event_per_sub']:.1f}", f"{r['latency_p50_ms']:.1f}",
                     f"{r['latency_max_ms']:.1f}", f"{r['rss_end_kib'] / 1024:.1f}",
                     f"{r['patch_events']}/{r['whole_events']}",
                     f"{r['verified_streams']}" + ("" if not r["error_count"] else " FAILED")))
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    print("  ".join(h.rjust(w) for h, w in zip(head, widths)))
    for row in rows:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths)))

    print("\nmeans over the rounds, and delta / full (same run):")
    keys = (("wire_bytes_per_event", "wire B/event", "{:,.0f}"),
            ("server_cpu_ms_per_event", "CPU ms/event", "{:.2f}"),
            ("server_cpu_us_per_event_per_sub", "CPU us/event/sub", "{:.1f}"),
            ("fanout_cpu_us_per_event_per_sub", "fan-out us/event/sub", "{:.1f}"),
            ("rss_end_kib", "RSS MB", "{:.1f}"))
    for storage in dict.fromkeys(r["storage"] for r in recs):
        print(f"  {storage}:")
        for key, label, fmt in keys:
            vals = {m: [r[key] / (1024 if key == "rss_end_kib" else 1) for r in recs
                        if r["storage"] == storage and r["mode"] == m] for m in ("full", "delta")}
            if not vals["full"] or not vals["delta"]:
                continue
            f, d = statistics.mean(vals["full"]), statistics.mean(vals["delta"])
            per_round = " / ".join(fmt.format(v) for v in vals["full"]) + " | " + " / ".join(fmt.format(v) for v in vals["delta"])
            print(f"    {label:>21}: full {fmt.format(f):>9}  delta {fmt.format(d):>9}  delta/full "
                  f"{d / f if f else float('nan'):.4f}   (rounds: {per_round})")
    bad = [r for r in recs if r["error_count"]]
    for r in bad:
        print(f"FAILED {r['storage']} round {r['round']} {r['mode']}: {r['errors']}")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--report", help="print the table of a results file and exit")
    ap.add_argument("--url")
    ap.add_argument("--pid", type=int)
    ap.add_argument("--mode", choices=("full", "delta"))
    ap.add_argument("--subs", type=int, default=100)
    ap.add_argument("--changes", type=int, default=200)
    ap.add_argument("--items", type=int, default=400)
    ap.add_argument("--title", type=int, default=400, help="characters per title (todos allows at most 500)")
    ap.add_argument("--verify", type=int, default=0, help="check only the first N streams (0: all)")
    ap.add_argument("--storage", default="memory", help="a label for the record")
    ap.add_argument("--round", type=int, default=1)
    ap.add_argument("--results")
    ap.add_argument("--timeout", type=float, default=240)
    a = ap.parse_args()
    if a.report:
        return report(a.report)
    if not (a.url and a.pid and a.mode):
        ap.error("--url, --pid and --mode are needed (or --report)")
    if not 1 <= a.title <= 500:
        ap.error("todos titles have 1 to 500 characters")
    _self_test()
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
