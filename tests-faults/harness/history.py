"""Operations as a history: each is invoked, then completes as ok, fail or unknown.

- ok: a 2xx reply (the change applied, or the read answered);
- fail: a reply that says nothing was applied (4xx, 503 write_contention, 503
  storage_unavailable, 503 session_limit_reached, 429) — the checker holds the server to it;
- unknown: no reply (timeout, connection broken, a 502/504 from nginx that sent the request)
  or 503 outcome_unknown: the change may or may not have been applied.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass, field, asdict
from typing import Optional

from . import http


@dataclass
class Op:
    id: int
    process: str
    kind: str                 # dispatch | read | delete | create
    session: str
    entry: str                # which node or balancer it went through
    feature: Optional[str] = None
    action: Optional[dict] = None
    key: Optional[str] = None
    title: Optional[str] = None   # a todos add's unique title: the change's identity
    invoked: float = 0.0
    completed: Optional[float] = None
    type: Optional[str] = None    # ok | fail | unknown
    status: Optional[int] = None
    code: Optional[str] = None
    version: Optional[int] = None
    state: Optional[dict] = None
    replayed: bool = False
    error: Optional[str] = None


@dataclass
class StreamRecord:
    name: str
    session: str
    entry: str
    resumed_from: Optional[int]   # Last-Event-ID sent, None for a fresh stream
    features: Optional[list]      # filter, None = all
    events: list = field(default_factory=list)   # http.Event
    ended: Optional[float] = None
    final: bool = False           # open until after the run settled: must reach the end
    error: Optional[str] = None


class History:
    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.streams: list[StreamRecord] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def invoke(self, **kw) -> Op:
        with self._lock:
            op = Op(id=next(self._ids), invoked=time.monotonic(), **kw)
            self.ops.append(op)
        return op

    def complete(self, op: Op, response: Optional[http.Response] = None, error: Optional[Exception] = None) -> Op:
        op.completed = time.monotonic()
        if error is not None:
            op.type = "unknown" if op.kind != "read" else "fail"
            op.error = str(error)
            return op
        op.status = response.status
        op.code = response.code
        body = response.json()
        if 200 <= response.status < 300:
            op.type = "ok"
            op.replayed = response.headers.get("idempotent-replayed") == "true"
            if isinstance(body, dict):
                op.version = body.get("version")
                op.state = body.get("state")
        elif op.code == "outcome_unknown" or response.status in (502, 504) or (
                response.status >= 500 and op.code is None):
            op.type = "unknown" if op.kind != "read" else "fail"
        else:
            op.type = "fail"
        return op

    def summary(self) -> dict:
        out: dict = {}
        for op in self.ops:
            k = f"{op.kind}:{op.type}"
            out[k] = out.get(k, 0) + 1
        codes: dict = {}
        for op in self.ops:
            if op.type != "ok":
                c = op.code or (f"status {op.status}" if op.status else "no reply")
                codes[c] = codes.get(c, 0) + 1
        out["non-ok answers"] = codes
        out["streams"] = len(self.streams)
        out["events"] = sum(len(s.events) for s in self.streams)
        return out

    def dump(self, path: str) -> None:
        with open(path, "w") as f:
            for op in self.ops:
                f.write(json.dumps(asdict(op)) + "\n")
            for s in self.streams:
                d = {"stream": s.name, "session": s.session, "entry": s.entry, "resumed_from": s.resumed_from,
                     "final": s.final, "error": s.error,
                     "events": [[e.id, e.event, e.data] for e in s.events]}
                f.write(json.dumps(d) + "\n")
