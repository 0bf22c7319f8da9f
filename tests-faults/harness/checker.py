"""Checks a history (harness/history.py) against what the server promises under faults.

`check(...)` returns a list of problems, each one sentence naming the session, feature,
version, operation or stream concerned; an empty list means the history is consistent:

1. No (session, feature, version) ever had two different states — across dispatch replies
   (replayed ones too), reads, snapshot and state events, and the final reads, on any node.
2. No two different acknowledged changes got the same (session, feature, version).
3. Every acknowledged change is in the final state exactly once (a todos add is identified by
   its unique title); no change answered with a definite failure ("nothing was applied") is
   in it; nothing is in it that no client invoked. Counters: acknowledged <= final version <=
   acknowledged + unknown.
4. Versions are contiguous: with add-only todos, the state at version v holds exactly the items
   "1".."v" (so no change is lost or doubled inside any observed state), and the reply to an
   add shows its own title as item v.
5. Every stream saw its changes in order, once: ids +1 at a time, each feature's versions +1 at
   a time after its snapshot; a resumed stream continues at Last-Event-ID + 1 (or starts with a
   snapshot); a stream open at the end reached the session's last seq.
6. No store left waiting: the final login state is not loading.
7. PostgreSQL, when given: each store's head is the final version read through the API, the
   session's head_seq is its last journal row, the last `replay_buffer` seqs are all present,
   and a deleted session has no rows left in any table.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Optional


def canon(state) -> str:
    return json.dumps(state, sort_keys=True, separators=(",", ":"))


class Checker:
    def __init__(self, history, final: dict, pg: Optional[dict] = None, deleted: Optional[dict] = None,
                 todos_add_only: bool = True, replay_buffer: Optional[int] = None) -> None:
        self.h = history
        self.final = final            # session -> feature -> (version, state)
        self.pg = pg or {}            # session -> {"head_seq", "stores": {f: v}, "seqs": [...]}
        self.deleted = deleted or {}  # session -> {table: rows left}
        self.todos_add_only = todos_add_only
        self.replay_buffer = replay_buffer
        self.problems: list[str] = []
        self.seen: dict = {}          # (s, f, v) -> (canonical state, where)

    def problem(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)

    def observe(self, session, feature, version, state, where: str) -> None:
        if version is None or state is None:
            return
        key = (session, feature, version)
        c = canon(state)
        if key in self.seen:
            if self.seen[key][0] != c:
                self.problem(f"two states for {session[:8]} {feature} v{version}: {self.seen[key][1]} saw "
                             f"{self.seen[key][0][:160]}, {where} saw {c[:160]}")
        else:
            self.seen[key] = (c, where)
        if feature == "todos" and self.todos_add_only and isinstance(state, dict):
            items = state.get("items", [])
            ids = [i.get("id") for i in items]
            if ids != [str(n) for n in range(1, version + 1)] or state.get("nextId") != version + 1:
                self.problem(f"{where}: todos of {session[:8]} at v{version} holds ids {ids[:5]}...{ids[-3:]} "
                             f"({len(ids)} items, nextId {state.get('nextId')}): not the items 1..{version}")

    def run(self) -> list[str]:
        ops = self.h.ops
        # 1 and 4: every observation.
        for op in ops:
            if op.type == "ok" and op.kind in ("dispatch", "read") and op.feature:
                self.observe(op.session, op.feature, op.version, op.state, f"op {op.id} ({op.kind} via {op.entry})")
        for s in self.h.streams:
            for e in s.events:
                if e.data is None:
                    continue
                if e.event == "state":
                    self.observe(s.session, e.data.get("feature"), e.data.get("version"), e.data.get("state"),
                                 f"stream {s.name} id {e.id}")
                elif e.event == "snapshot":
                    for f, fs in (e.data.get("features") or {}).items():
                        self.observe(s.session, f, fs.get("version"), fs.get("state"), f"stream {s.name} snapshot {e.id}")
        for session, features in self.final.items():
            for f, (v, st) in features.items():
                self.observe(session, f, v, st, "final read")

        # 2: one acknowledged change per version.
        acked: dict = defaultdict(set)
        for op in ops:
            if op.kind == "dispatch" and op.type == "ok" and op.version is not None:
                acked[(op.session, op.feature, op.version)].add(op.key or f"op{op.id}")
        for (s, f, v), ids in acked.items():
            if len(ids) > 1:
                self.problem(f"{len(ids)} different acknowledged changes got {s[:8]} {f} v{v}: {sorted(ids)[:4]}")

        # Idempotency: every ok answer to one key is the same change.
        by_key: dict = defaultdict(set)
        for op in ops:
            if op.kind == "dispatch" and op.type == "ok" and op.key:
                by_key[(op.session, op.key)].add((op.feature, op.version, canon(op.state)))
        for (s, k), answers in by_key.items():
            if len(answers) > 1:
                self.problem(f"key {k} on {s[:8]} answered as {len(answers)} different changes: "
                             f"{sorted((a[0], a[1]) for a in answers)}")

        # 3: the final state.
        self._final_todos(ops)
        self._final_counters(ops)
        # 5: streams.
        for s in self.h.streams:
            self._stream(s)
        # 6: nothing left waiting.
        for session, features in self.final.items():
            login = features.get("login")
            if login and isinstance(login[1], dict) and login[1].get("isLoading"):
                self.problem(f"login of {session[:8]} left waiting at v{login[0]} (isLoading true)")
        # 7: PostgreSQL.
        self._postgres()
        return self.problems

    def _final_todos(self, ops) -> None:
        adds = [op for op in ops if op.kind == "dispatch" and op.feature == "todos" and op.title]
        by_session: dict = defaultdict(list)
        for op in adds:
            by_session[op.session].append(op)
        for session, sops in by_session.items():
            if session in self.deleted:
                continue
            final = self.final.get(session, {}).get("todos")
            if final is None:
                self.problem(f"no final todos state read for {session[:8]}")
                continue
            version, state = final
            titles = [i.get("title") for i in state.get("items", [])]
            count: dict = defaultdict(int)
            for t in titles:
                count[t] += 1
            invoked = {op.title for op in sops}
            outcome: dict = defaultdict(set)
            for op in sops:
                outcome[op.title].add(op.type)
            for op in sops:
                if op.type == "ok":
                    if op.version is not None and op.version > version:
                        self.problem(f"op {op.id} acknowledged {session[:8]} todos v{op.version}, final is v{version}")
                    if op.state and op.version and self.todos_add_only:
                        items = op.state.get("items", [])
                        if len(items) < op.version or items[op.version - 1].get("title") != op.title:
                            self.problem(f"op {op.id}'s reply (v{op.version}) does not end with its own title {op.title}")
            for title, types in outcome.items():
                n = count.get(title, 0)
                if "ok" in types and n != 1:
                    self.problem(f"acknowledged change '{title}' on {session[:8]} is in the final state {n} times"
                                 + (" (lost)" if n == 0 else " (applied more than once)"))
                elif "ok" not in types and n > 1:
                    self.problem(f"change '{title}' on {session[:8]} applied {n} times")
                if n >= 1 and types == {"fail"}:
                    fails = [f"op {op.id} {op.status} {op.code}" for op in sops if op.title == title]
                    self.problem(f"change '{title}' on {session[:8]} was answered 'nothing applied' ({', '.join(fails)}) "
                                 f"but is in the final state")
            for t in count:
                if t not in invoked:
                    self.problem(f"'{t}' is in the final todos of {session[:8]} but no client sent it")

    def _final_counters(self, ops) -> None:
        incs = [op for op in ops if op.kind == "dispatch" and op.feature == "counter"]
        by_session: dict = defaultdict(list)
        for op in incs:
            by_session[op.session].append(op)
        for session, sops in by_session.items():
            if session in self.deleted:
                continue
            final = self.final.get(session, {}).get("counter")
            if final is None:
                self.problem(f"no final counter state read for {session[:8]}")
                continue
            version, state = final
            logical: dict = defaultdict(set)
            for op in sops:
                logical[op.key or f"op{op.id}"].add(op.type)
            ok = sum(1 for t in logical.values() if "ok" in t)
            unknown = sum(1 for t in logical.values() if "ok" not in t and "unknown" in t)
            if not (ok <= version <= ok + unknown):
                self.problem(f"counter of {session[:8]} at v{version}: {ok} changes acknowledged, {unknown} unknown "
                             f"(the version must lie between {ok} and {ok + unknown})")
            if isinstance(state, dict) and state.get("count") != version and all(
                    (op.action or {}).get("type") == "increment" and (op.action or {}).get("by", 1) == 1 for op in sops):
                self.problem(f"counter of {session[:8]} counts {state.get('count')} at v{version}")

    def _stream(self, s) -> None:
        last_id = s.resumed_from
        versions: dict = {}
        first = True
        for e in s.events:
            if e.id is None:
                continue
            if e.event == "snapshot":
                if not first:
                    self.problem(f"stream {s.name}: a snapshot in the middle (id {e.id})")
                for f, fs in (e.data or {}).get("features", {}).items():
                    versions[f] = fs.get("version")
                last_id = e.id
                first = False
                continue
            if first and s.resumed_from is None:
                self.problem(f"stream {s.name}: first event is {e.event} {e.id}, not a snapshot")
            feature = (e.data or {}).get("feature")
            v = (e.data or {}).get("version")
            if last_id is not None and s.features is None and e.id != last_id + 1:
                self.problem(f"stream {s.name}: id {e.id} after {last_id} ("
                             + ("a gap" if e.id > last_id + 1 else "out of order or repeated") + ")")
            if last_id is not None and e.id <= last_id:
                self.problem(f"stream {s.name}: id {e.id} not after {last_id}")
            if feature in versions and versions[feature] is not None and v != versions[feature] + 1:
                self.problem(f"stream {s.name}: {feature} v{v} after v{versions[feature]}")
            versions[feature] = v
            last_id = e.id
            first = False
        if s.final and s.session not in self.deleted:
            head = (self.pg.get(s.session) or {}).get("head_seq")
            if head is None:
                head = max([e.id for st in self.h.streams if st.session == s.session for e in st.events
                            if e.id is not None] or [0])
            if last_id != head:
                self.problem(f"stream {s.name} open at the end stopped at id {last_id}, the session's last seq is {head}")

    def _postgres(self) -> None:
        for session, pg in self.pg.items():
            if session in self.deleted:
                continue
            final = self.final.get(session, {})
            for f, v in pg.get("stores", {}).items():
                if f in final and final[f][0] != v:
                    self.problem(f"PostgreSQL's head of {session[:8]} {f} is v{v}, the API reads v{final[f][0]}")
            seqs = sorted(pg.get("seqs", []))
            head = pg.get("head_seq", 0)
            if seqs and seqs[-1] != head:
                self.problem(f"{session[:8]}: head_seq {head} but the last journal row is seq {seqs[-1]}")
            if len(seqs) != len(set(seqs)):
                self.problem(f"{session[:8]}: a seq appears twice in the journal")
            if self.replay_buffer and head:
                want = set(range(max(1, head - self.replay_buffer + 1), head + 1))
                missing = sorted(want - set(seqs))
                if missing:
                    self.problem(f"{session[:8]}: journal misses seqs {missing[:10]} of its last {self.replay_buffer}")
        for session, left in self.deleted.items():
            rows = {t: n for t, n in left.items() if n}
            if rows:
                self.problem(f"deleted session {session[:8]} left rows behind: {rows}")


def check(history, final, pg=None, deleted=None, todos_add_only=True, replay_buffer=None) -> list[str]:
    return Checker(history, final, pg, deleted, todos_add_only, replay_buffer).run()
