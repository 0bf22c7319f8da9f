"""Durable timers under faults (issue 38): the todos reminders a workload schedules, re-schedules
and cancels while owners are killed, paused or cut off from PostgreSQL, and the checker that
counts every timer's firings in the sessions' journals.

`check_timers(history, journals, finals, ...)` returns (problems, counts). `journals` is each
session's whole journal as `GET /v1/sessions/{id}/history` pages it (`read_journal`), `finals`
each session's final todos `(version, state)`, `pending` what `GET .../timers` still lists at
the end. The journal is the order of record: every change of the session, one `seq` at a time.

A *schedule* is one committed `remind` change (a dispatch of `{"type": "remind", "id": x, ...}`
in the journal, acknowledged or not): it starts a timer `remind-x` due `after` seconds later
and replaces the pending one of that id. Walking the journal in seq order, each schedule ends
exactly once, as

- *replaced*: a later `remind` of the same id came first;
- *cancelled*: a `cancelReminder` of the same id came first (a cancel with nothing pending does
  nothing);
- *fired*: a change of cause `timer` with `timer.id` = `remind-x` came first;
- *pending*: none of them (the journal ended).

Scheduling an id again after it fired is a new schedule (a new timer), counted on its own. The
count of a schedule is the number of timer changes attributed to it: the timer change that ends
it, and any timer change of that id while no schedule of it is pending (attributed to the last
schedule: the one that already fired, was cancelled or replaced — so a second firing makes the
count 2, a firing after a cancel or a replacement makes it 1 for a schedule that must have 0).

The rules, each a problem when broken:

T1. The journal is whole: seqs 1..N without a gap and not truncated; the todos versions in it
    run 1, 2, ... in seq order; the last is the final todos version read through the API.
T2. Every acknowledged `remind` or `cancelReminder` (reply version v) is the journal's todos
    change at version v, with the same action. Per (session, action), the number of journal
    dispatch changes carrying it lies between the acknowledged operations and the acknowledged
    plus unknown-outcome ones (one logical operation per Idempotency-Key): an unknown schedule
    or cancel applied 0 or 1 time, a refused one never. So the last acknowledged schedule of an
    item, with no cancel or schedule after it, is that item's last schedule in the journal; an
    acknowledged cancel with none after it ends the item's schedules.
T3. Counts: every schedule fires at most once (count <= 1); a replaced or cancelled schedule
    fires 0 times; a timer change with no schedule pending is a double firing (or a firing of a
    cancelled timer). No schedule is left pending at the end, and `GET .../timers` lists nothing
    (a due schedule that never fired is a lost firing): the last schedule of every id that was not
    cancelled fired exactly once, after it.
T4. Each firing is its schedule's: `timer.scheduledAt` within `sched_ms` of the `remind`
    change's `time`, `timer.due - timer.scheduledAt` = its `after` in ms; it fired at or after
    its due time (`time >= timer.due - skew_ms`); its action is `reminderDue` of the item; its
    effect the toast `Reminder: <title>`.
T5. The final state: an item is `reminded` iff its last remind or firing in the journal is a
    firing (`remind` sets it false, a firing true, a cancel leaves it).
"""

from __future__ import annotations

import asyncio
import os
import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Optional

from . import http

SKEW_MS = 5        # a firing's time may be this much before its due time (clocks of two nodes)
SCHED_MS = 2000    # a timer's scheduledAt lies this close to its remind change's time


def canon(x) -> str:
    return json.dumps(x, sort_keys=True, separators=(",", ":"))


@dataclass
class Schedule:
    session: str
    timer: str
    index: int                 # 1, 2, ... per (session, timer)
    seq: int
    time: int                  # the remind change's time (ms)
    after: int
    end: str = "pending"       # fired | replaced | cancelled | pending
    end_seq: Optional[int] = None
    firings: list = field(default_factory=list)   # the timer changes attributed to it

    def key(self) -> str:
        return f"{self.session}/{self.timer}#{self.index}"


def check_timers(history, journals: dict, finals: dict, pending: Optional[dict] = None,
                 truncated: Optional[dict] = None, skew_ms: int = SKEW_MS, sched_ms: int = SCHED_MS):
    """(problems, counts): see the module's docstring for the rules; counts maps each schedule
    (`session/remind-x#k`) to its end and number of firings."""
    problems: list[str] = []

    def problem(text: str) -> None:
        if text not in problems:
            problems.append(text)

    schedules: list[Schedule] = []
    for session, changes in journals.items():
        s8 = session[:8]
        # T1
        if (truncated or {}).get(session):
            problem(f"journal of {s8} is truncated (keptFrom {truncated[session]}): firings cannot be counted")
        seqs = [c["seq"] for c in changes]
        if seqs != list(range(1, len(seqs) + 1)):
            problem(f"journal of {s8} has seqs {seqs[:5]}...{seqs[-3:]}, not 1..{len(seqs)}")
        todo_changes = [c for c in changes if c.get("feature") == "todos"]
        tv = [c["version"] for c in todo_changes]
        if tv != list(range(1, len(tv) + 1)):
            problem(f"journal of {s8}: todos versions {tv[:8]}... do not run 1, 2, ...")
        final = finals.get(session)
        if final is None:
            problem(f"no final todos state of {s8}")
        elif final[0] != (tv[-1] if tv else 0):
            problem(f"final todos of {s8} is v{final[0]}, its journal ends at v{tv[-1] if tv else 0}")

        # T3/T4: walk the journal.
        titles: dict = {}
        current: dict = {}       # timer id -> pending Schedule
        last: dict = {}          # timer id -> last Schedule
        reminded: dict = {}      # item id -> True/False by its last remind or firing
        index: dict = defaultdict(int)
        for c in todo_changes:
            a = c.get("action") or {}
            cause = c.get("cause")
            if cause == "dispatch" and a.get("type") == "add":
                # ids are nextId: 1, 2, ... (the workload never removes an item)
                titles[str(len(titles) + 1)] = a.get("title", "").strip()
            elif cause == "dispatch" and a.get("type") == "remind":
                tid = f"remind-{a.get('id')}"
                if tid in current:
                    current[tid].end, current[tid].end_seq = "replaced", c["seq"]
                index[tid] += 1
                sch = Schedule(session, tid, index[tid], c["seq"], c.get("time", 0), int(a.get("after", 0)))
                schedules.append(sch)
                current[tid] = last[tid] = sch
                reminded[a.get("id")] = False
            elif cause == "dispatch" and a.get("type") == "cancelReminder":
                tid = f"remind-{a.get('id')}"
                if tid in current:
                    current[tid].end, current[tid].end_seq = "cancelled", c["seq"]
                    del current[tid]
            elif cause == "timer":
                t = c.get("timer") or {}
                tid = t.get("id")
                where = f"{s8} seq {c['seq']} ({tid})"
                sch = current.pop(tid, None)
                if sch is not None:
                    sch.end, sch.end_seq = "fired", c["seq"]
                    sch.firings.append(c["seq"])
                elif tid in last:
                    sch = last[tid]
                    sch.firings.append(c["seq"])
                    problem(f"timer {tid} of {s8} fired at seq {c['seq']} with nothing pending: its schedule "
                            f"#{sch.index} (seq {sch.seq}) was {sch.end} at seq {sch.end_seq}"
                            + (" — a double firing" if sch.end == "fired" else " — a firing of a timer that no longer existed"))
                else:
                    problem(f"timer change {where} of a timer never scheduled")
                    continue
                item = (tid or "")[len("remind-"):]
                reminded[item] = True
                if a != {"type": "reminderDue", "id": item}:
                    problem(f"timer change {where} has action {a}")
                title = titles.get(item)
                if title is not None and c.get("effect") != {"type": "toast", "message": f"Reminder: {title}"}:
                    problem(f"timer change {where} has effect {c.get('effect')}, not the toast of '{title}'")
                due, at, now = t.get("due"), t.get("scheduledAt"), c.get("time")
                if None in (due, at, now):
                    problem(f"timer change {where} lacks due, scheduledAt or time: {t}, time {now}")
                    continue
                if now < due - skew_ms:
                    problem(f"timer change {where} fired at {now}, {due - now} ms before its due time {due}")
                if due - at != sch.after * 1000:
                    problem(f"timer change {where}: due - scheduledAt = {due - at} ms, its schedule (seq {sch.seq}) "
                            f"said after {sch.after} s — the firing of another schedule")
                if abs(at - sch.time) > sched_ms:
                    problem(f"timer change {where}: scheduledAt {at} is {at - sch.time} ms from its schedule's "
                            f"change (seq {sch.seq}, time {sch.time}) — the firing of another schedule")
        for tid, sch in current.items():
            problem(f"timer {tid} of {s8} (schedule #{sch.index}, seq {sch.seq}, after {sch.after} s) never fired "
                    f"and was not cancelled: a lost firing")
        # T5
        if final is not None and isinstance(final[1], dict):
            for item in final[1].get("items", []):
                want = reminded.get(item.get("id"), False)
                if bool(item.get("reminded")) != want:
                    problem(f"final todos of {s8}: item {item.get('id')} has reminded {item.get('reminded')}, "
                            f"its journal says {want}")
    for sch in schedules:
        if len(sch.firings) > 1:
            problem(f"timer {sch.timer} of {sch.session[:8]} schedule #{sch.index} (seq {sch.seq}) fired "
                    f"{len(sch.firings)} times: seqs {sch.firings}")
    # T3: nothing listed as pending at the end.
    for session, timers in (pending or {}).items():
        if timers:
            problem(f"{session[:8]} still lists pending timers at the end: {[t.get('id') for t in timers]}")

    # T2: acknowledged schedules and cancels against the journal.
    ops = [op for op in history.ops if op.kind == "dispatch" and op.feature == "todos"
           and (op.action or {}).get("type") in ("remind", "cancelReminder")]
    by_version: dict = {}
    applied: dict = defaultdict(int)
    for session, changes in journals.items():
        for c in changes:
            if c.get("feature") == "todos":
                by_version[(session, c["version"])] = c
                if c.get("cause") == "dispatch" and (c.get("action") or {}).get("type") in ("remind", "cancelReminder"):
                    applied[(session, canon(c["action"]))] += 1
    logical: dict = defaultdict(lambda: defaultdict(set))
    for op in ops:
        if op.session not in journals:
            continue
        if op.type == "ok":
            c = by_version.get((op.session, op.version))
            if c is None or c.get("cause") != "dispatch" or canon(c.get("action")) != canon(op.action):
                problem(f"op {op.id} ({op.action}) acknowledged as todos v{op.version} of {op.session[:8]}, the "
                        f"journal's v{op.version} is {None if c is None else (c.get('cause'), c.get('action'))}")
        logical[(op.session, canon(op.action))][op.key or f"op{op.id}"].add(op.type)
    for (session, action), keys in logical.items():
        ok = sum(1 for t in keys.values() if "ok" in t)
        unknown = sum(1 for t in keys.values() if "ok" not in t and "unknown" in t)
        n = applied.get((session, action), 0)
        if not ok <= n <= ok + unknown:
            problem(f"{action} on {session[:8]}: {n} in the journal, {ok} acknowledged, {unknown} unknown "
                    f"(must lie between {ok} and {ok + unknown})")
    for (session, action), n in applied.items():
        if (session, action) not in logical:
            problem(f"{action} is in the journal of {session[:8]} {n} times but no client sent it")

    counts = {sch.key(): {"seq": sch.seq, "after": sch.after, "end": sch.end, "end_seq": sch.end_seq,
                          "firings": len(sch.firings)} for sch in schedules}
    return problems, counts


def summarize(counts: dict) -> dict:
    ends: dict = defaultdict(int)
    for c in counts.values():
        ends[c["end"]] += 1
    return {"schedules": len(counts), "firings": sum(c["firings"] for c in counts.values()),
            "max_firings": max([c["firings"] for c in counts.values()] or [0]), **ends}


# -- reading a cluster -------------------------------------------------------------------------------

async def get_json(port: int, path: str, auth: dict, within: float = 30.0):
    """GET through `port` until a 200 (503s, 502s and timeouts while a session moves are asked
    again), for at most `within` seconds."""
    deadline = time.monotonic() + within
    last = ""
    while True:
        try:
            r = await http.request(port, "GET", path, auth, timeout=10)
            if r.status == 200:
                return r.json()
            last = f"{r.status} {r.body[:200]!r}"
            if r.status not in (502, 503, 504):
                raise AssertionError(f"GET {path}: {last}")
        except (http.Timeout, http.Broken) as e:
            last = str(e)
        if time.monotonic() > deadline:
            raise AssertionError(f"GET {path}: no answer within {within}s: {last}")
        await asyncio.sleep(0.2)


async def read_journal(port: int, session) -> tuple:
    """(changes, keptFrom when truncated else None): every page of GET .../history."""
    changes: list = []
    after = 0
    kept = None
    while True:
        j = await get_json(port, f"/v1/sessions/{session.id}/history?after={after}&limit=1000", session.auth)
        if j.get("truncated"):
            kept = j.get("keptFrom")
        changes += j.get("changes", [])
        if j.get("next") is None:
            return changes, kept
        after = j["next"]


async def pending_timers(port: int, session) -> list:
    return (await get_json(port, f"/v1/sessions/{session.id}/timers", session.auth)).get("timers", [])


# -- the workload ------------------------------------------------------------------------------------

KINDS = ("once", "replace", "cancel", "cancel_race", "refire")


class Reminders:
    """Per session, one task doing its operations one after another through nginx: adds items,
    then (phase 1) schedules a reminder of each (1 to 4 s), then (phase 2, while the scenario
    kills, pauses or cuts off the owner) re-schedules some before they fire (`replace`),
    cancels some (`cancel`, and `cancel_race`: a 1 s reminder cancelled about when it is due),
    and schedules some again once they fired (`refire`). Half the operations carry an
    Idempotency-Key and are retried with it after an unknown outcome; the others are retried
    only after a definite failure (nothing applied), so some outcomes stay unknown."""

    def __init__(self, history, sessions, entry, rng, items: int = 5) -> None:
        from .workload import Client
        self.h = history
        self.sessions = sessions
        self.entry = entry
        self.rng = rng
        self.items = items
        self.client = Client(history, "reminders", timeout=6.0)
        self.round = 0
        self.phase1 = 0
        self.plans: list = []      # (round, session, item, kind)

    async def op(self, session, action: dict, keyed: bool, title: Optional[str] = None, within: float = 40.0):
        key = f"rk-{self.round}-{session.id[:6]}-{len(self.h.ops)}" if keyed else None
        deadline = time.monotonic() + within
        while True:
            op = await self.client.dispatch(session, self.entry, "todos", action, key=key, title=title)
            if op.type == "ok" or (op.type == "fail" and op.status == 422):
                return op
            if op.type == "unknown" and key is None:
                return op
            if time.monotonic() > deadline:
                return op
            await asyncio.sleep(0.2)

    async def run_round(self) -> None:
        self.round += 1
        self.phase1 = 0
        await asyncio.gather(*(self._session(s, i) for i, s in enumerate(self.sessions)))

    async def _session(self, s, i: int) -> None:
        rng = self.rng
        ids = []
        for k in range(self.items):
            title = f"r{self.round}-{i}-{k}"
            op = await self.op(s, {"type": "add", "title": title}, keyed=True, title=title)
            assert op.type == "ok", f"add {title} on {s.id[:8]}: {op.type} {op.status} {op.code} {op.error}"
            ids.append(next(it["id"] for it in op.state["items"] if it["title"] == title))
        plan = [(item, KINDS[(k + i + self.round) % len(KINDS)] if k < len(KINDS) else rng.choice(KINDS))
                for k, item in enumerate(ids)]
        self.plans += [(self.round, s.id, item, kind) for item, kind in plan]
        acked: dict = {}
        for item, kind in plan:
            after = 1 if kind in ("cancel_race", "refire") else rng.randint(2, 4) if kind in ("replace", "cancel") \
                else rng.randint(1, 4)
            acked[item] = await self.op(s, {"type": "remind", "id": item, "after": after}, keyed=rng.random() < 0.5)
        self.phase1 += 1
        await asyncio.sleep(rng.uniform(0, 0.5))
        for item, kind in plan:
            keyed = rng.random() < 0.5
            if kind == "replace":
                await self.op(s, {"type": "remind", "id": item, "after": rng.randint(1, 4)}, keyed)
            elif kind == "cancel":
                await self.op(s, {"type": "cancelReminder", "id": item}, keyed)
            elif kind == "cancel_race":
                done = acked[item].completed or time.monotonic()
                await asyncio.sleep(max(0.0, done + rng.uniform(0.8, 1.2) - time.monotonic()))
                await self.op(s, {"type": "cancelReminder", "id": item}, keyed)
        for item, kind in plan:
            if kind == "refire":
                # once it fired (left the pending list), a new timer of the same id
                deadline = time.monotonic() + 40
                while time.monotonic() < deadline:
                    try:
                        timers = await pending_timers(self.entry[1], s)
                    except AssertionError:
                        timers = [{"id": f"remind-{item}"}]
                    if all(t.get("id") != f"remind-{item}" for t in timers):
                        break
                    await asyncio.sleep(0.2)
                await self.op(s, {"type": "remind", "id": item, "after": rng.randint(1, 3)}, rng.random() < 0.5)


def record_counts(path: str, name: str, summary: dict, counts: dict) -> dict:
    """Adds this run's per-timer counts to `path` (every run's, across runs and invocations:
    `{"runs": {name: summary}, "timers": {"name/session/remind-x#k": {..., "firings": n}}}`)
    and returns the totals over every run recorded there."""
    try:
        with open(path) as f:
            all_ = json.load(f)
    except (OSError, ValueError):
        all_ = {"runs": {}, "timers": {}}
    all_["runs"][name] = summary
    all_["timers"] = {k: v for k, v in all_["timers"].items() if not k.startswith(name + "/")}
    all_["timers"].update({f"{name}/{k}": v for k, v in counts.items()})
    all_["totals"] = {**summarize(all_["timers"]), "runs": len(all_["runs"]),
                      "counted_more_than_once": sorted(k for k, v in all_["timers"].items() if v["firings"] > 1)}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(all_, f, indent=1, sort_keys=True)
    os.replace(tmp, path)
    return all_["totals"]
