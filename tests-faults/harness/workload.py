"""Concurrent clients that record every operation, stream watchers that record every event,
and the final settle-and-read that the checker needs. Bounded in operations and in time."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Optional

from . import http
from .history import History, StreamRecord


@dataclass
class Session:
    id: str
    token: str

    @property
    def auth(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"}


async def create_session(port: int, timeout: float = 10.0) -> Session:
    deadline = time.monotonic() + 30
    while True:
        try:
            r = await http.request(port, "POST", "/v1/sessions", timeout=timeout)
            if r.status == 201:
                j = r.json()
                return Session(j["id"], j["token"])
            last = f"{r.status} {r.body[:200]!r}"
        except (http.Timeout, http.Broken) as e:
            last = str(e)
        if time.monotonic() > deadline:
            raise AssertionError(f"no session from :{port}: {last}")
        await asyncio.sleep(0.2)


class Client:
    """Operations through one entry point at a time, each recorded in the history."""

    def __init__(self, history: History, process: str, timeout: float = 8.0) -> None:
        self.h = history
        self.process = process
        self.timeout = timeout

    async def dispatch(self, session: Session, entry, feature: str, action: dict, key: Optional[str] = None,
                       title: Optional[str] = None, headers: Optional[dict] = None):
        name, port = entry
        op = self.h.invoke(process=self.process, kind="dispatch", session=session.id, entry=name, feature=feature,
                           action=action, key=key, title=title)
        hdrs = dict(session.auth)
        if key:
            hdrs["Idempotency-Key"] = key
        hdrs.update(headers or {})
        try:
            r = await http.request(port, "POST", f"/v1/sessions/{session.id}/dispatch", hdrs,
                                   {"feature": feature, "action": action}, timeout=self.timeout)
        except (http.Timeout, http.Broken) as e:
            return self.h.complete(op, error=e)
        return self.h.complete(op, r)

    async def read(self, session: Session, entry, feature: str):
        name, port = entry
        op = self.h.invoke(process=self.process, kind="read", session=session.id, entry=name, feature=feature)
        try:
            r = await http.request(port, "GET", f"/v1/sessions/{session.id}/state/{feature}", session.auth,
                                   timeout=self.timeout)
        except (http.Timeout, http.Broken) as e:
            return self.h.complete(op, error=e)
        return self.h.complete(op, r)

    async def delete(self, session: Session, entry):
        name, port = entry
        op = self.h.invoke(process=self.process, kind="delete", session=session.id, entry=name)
        try:
            r = await http.request(port, "DELETE", f"/v1/sessions/{session.id}", session.auth, timeout=self.timeout)
        except (http.Timeout, http.Broken) as e:
            return self.h.complete(op, error=e)
        return self.h.complete(op, r)


async def open_stream(history: History, session: Session, entry, name: str, last_event_id: Optional[int] = None,
                      timeout: float = 10.0) -> StreamRecord:
    headers = dict(session.auth)
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    stream = http.EventStream(entry[1], f"/v1/sessions/{session.id}/events", headers, name=name)
    record = StreamRecord(name=name, session=session.id, entry=entry[0], resumed_from=last_event_id, features=None)
    record.events = stream.events
    record.stream = stream  # type: ignore[attr-defined]
    history.streams.append(record)
    try:
        await stream.open(timeout)
    except http.Timeout as e:
        record.error = str(e)
    record.error = record.error or stream.error
    return record


class Workload:
    """Workers doing todos adds (unique titles, half of them with an Idempotency-Key and
    retried with it after an unknown outcome), counter increments and reads, on every session,
    through the given entry points; one watcher per session keeps a stream open and resumes it
    elsewhere with Last-Event-ID when it ends."""

    def __init__(self, history: History, sessions, entries, workers: int = 6, max_ops: int = 400,
                 seed: int = 1, key_fraction: float = 0.5, read_fraction: float = 0.2,
                 counter_fraction: float = 0.15, stream_entries=None, pace: float = 0.03) -> None:
        self.h = history
        self.sessions = sessions
        self.entries = entries
        self.workers = workers
        self.max_ops = max_ops
        self.rng = random.Random(seed)
        self.key_fraction = key_fraction
        self.read_fraction = read_fraction
        self.counter_fraction = counter_fraction
        self.stream_entries = stream_entries or entries
        self.pace = pace
        self.stop = asyncio.Event()
        self.done_ops = 0
        self.tasks: list = []
        self.chains: dict = {}

    def start(self) -> None:
        for w in range(self.workers):
            self.tasks.append(asyncio.create_task(self._worker(w)))
        for i, s in enumerate(self.sessions):
            self.tasks.append(asyncio.create_task(self._watch(s, i)))

    def acknowledged(self, after: float = 0.0, entry: Optional[str] = None) -> int:
        return sum(1 for op in self.h.ops if op.kind == "dispatch" and op.type == "ok" and op.invoked >= after
                   and (entry is None or op.entry == entry))

    async def _worker(self, w: int) -> None:
        client = Client(self.h, f"w{w}")
        n = 0
        while not self.stop.is_set() and self.done_ops < self.max_ops:
            self.done_ops += 1
            n += 1
            session = self.rng.choice(self.sessions)
            entry = self.rng.choice(self.entries)
            r = self.rng.random()
            if r < self.read_fraction:
                await client.read(session, entry, self.rng.choice(["todos", "counter"]))
                continue
            keyed = self.rng.random() < self.key_fraction
            key = f"k-{w}-{n}" if keyed else None
            if r < self.read_fraction + self.counter_fraction:
                feature, action, title = "counter", {"type": "increment"}, None
            else:
                title = f"t-{w}-{n}"
                feature, action = "todos", {"type": "add", "title": title}
            op = await client.dispatch(session, entry, feature, action, key=key, title=title)
            tries = 0
            # An unknown outcome with a key is retried with the same key (it applies at most once).
            while key and op.type == "unknown" and tries < 4 and not self.stop.is_set():
                tries += 1
                await asyncio.sleep(0.25)
                op = await client.dispatch(session, self.rng.choice(self.entries), feature, action, key=key, title=title)
            await asyncio.sleep(self.pace if op.type == "ok" else max(self.pace, 0.05))

    async def _watch(self, session: Session, i: int) -> None:
        chain = self.chains.setdefault(session.id, [])
        last: Optional[int] = None
        k = 0
        while not self.stop.is_set():
            entry = self.stream_entries[(i + k) % len(self.stream_entries)]
            k += 1
            rec = await open_stream(self.h, session, entry, f"{session.id[:6]}#{k}@{entry[0]}", last)
            chain.append(rec)
            stream = rec.stream  # type: ignore[attr-defined]
            while stream.ended is None and not self.stop.is_set():
                await asyncio.sleep(0.05)
            if stream.ended is not None:
                rec.ended = stream.ended
                rec.error = rec.error or stream.error
                last = stream.last_id if stream.last_id is not None else last
                await asyncio.sleep(0.2)

    async def finish(self, timeout: float = 30.0) -> None:
        """Stops the workers (waiting for their operations in flight to complete)."""
        self.stop.set()
        workers = self.tasks[:self.workers]
        await asyncio.wait_for(asyncio.gather(*workers, return_exceptions=True), timeout)
        await asyncio.gather(*self.tasks[self.workers:], return_exceptions=True)

    async def drain_streams(self, heads: dict, timeout: float = 20.0) -> None:
        """The last stream of each session stays open until it reached the session's last seq
        (heads: session id -> head_seq), then is closed and marked final."""
        deadline = time.monotonic() + timeout
        for sid, chain in self.chains.items():
            if not chain:
                continue
            rec = chain[-1]
            stream = rec.stream  # type: ignore[attr-defined]
            if stream.ended is not None:
                continue
            want = heads.get(sid)
            while time.monotonic() < deadline and stream.ended is None and (want and (stream.last_id or 0) < want):
                await asyncio.sleep(0.05)
            rec.final = stream.ended is None
            stream.close()
            await stream.wait_closed()


FEATURES = ("counter", "todos", "settings", "login")


async def settle_and_read(cluster, history: History, sessions, skip_nodes=frozenset()):
    """After the faults are healed: every live node ready, then each session's state read on
    every live node (recorded as reads) and returned as the final state (from the first one)."""
    await cluster.wait_ready([n for n in cluster.nodes if n.alive() and not n.paused and n.name not in skip_nodes])
    final: dict = {}
    for s in sessions:
        for node in cluster.nodes:
            if not node.alive() or node.paused or node.name in skip_nodes:
                continue
            # One read per feature: the all-states read can report a store it dropped as
            # version 0 (test_finding_all_state_read_reports_dropped_store_as_initial).
            features = {}
            for f in FEATURES:
                try:
                    r = await _read_when_placed(node.port, f"/v1/sessions/{s.id}/state/{f}", s.auth)
                except (http.Timeout, http.Broken) as e:
                    # A ready node that does not answer a read is a finding of its own: say what
                    # PostgreSQL is doing, and whether the node answers at all later.
                    diag = cluster.diagnose()
                    later = "no answer within 45 s more either"
                    try:
                        r2 = await http.request(node.port, "GET", f"/v1/sessions/{s.id}/state/{f}", s.auth, timeout=45)
                        later = f"a second read answered {r2.status}"
                    except (http.Timeout, http.Broken):
                        pass
                    ready = "?"
                    try:
                        ready = (await http.request(node.port, "GET", "/readyz", timeout=5)).status
                    except (http.Timeout, http.Broken):
                        ready = "no answer"
                    raise AssertionError(f"final read of {s.id[:8]} {f} on node {node.name} (pid {node.pid}): {e}; "
                                         f"{later}; /readyz: {ready}; PostgreSQL sessions:\n{diag}") from None
                if r.status != 200:
                    raise AssertionError(f"final read of {s.id[:8]} {f} on {node.name}: {r.status} {r.body[:200]!r}")
                j = r.json()
                features[f] = {"version": j["version"], "state": j["state"]}
            for f, fs in features.items():
                op = history.invoke(process="final", kind="read", session=s.id, entry=node.name, feature=f)
                op.completed, op.type, op.status, op.version, op.state = time.monotonic(), "ok", 200, fs["version"], fs["state"]
            final.setdefault(s.id, {f: (fs["version"], fs["state"]) for f, fs in features.items()})
    return final


async def _read_when_placed(port, path, auth, within: float = 20.0):
    """GET `path`; while it answers 503 owner_unavailable (the session's owner died moments
    ago and its lease has not expired yet: nothing to read anywhere until another node takes
    the session over) or 503 storage_unavailable (a node just back from a partition whose pool
    is still reconnecting), ask again after Retry-After, as a client would, for at most
    `within` seconds. Any other answer is returned as it is."""
    deadline = time.monotonic() + within
    while True:
        r = await http.request(port, "GET", path, auth, timeout=15)
        transient = r.status == 503 and r.code in ("owner_unavailable", "storage_unavailable")
        if not transient or time.monotonic() > deadline:
            return r
        await asyncio.sleep(float(r.headers.get("retry-after", "1")))
