"""The timers' checker (harness/timers.py) on hand-made journals: a consistent one passes; a
double firing, a lost firing, a firing after a cancel or a replacement, an early firing, a
wrong `reminded`, an acknowledged schedule missing from the journal and an unknown cancel
applied twice each fail it."""

import time

from harness.history import History
from harness.timers import check_timers, summarize

S = "session-tttttttttttttt"
T0 = 1_800_000_000_000


class J:
    """A journal built change by change (todos only), with the client's operations."""

    def __init__(self) -> None:
        self.changes: list = []
        self.h = History()
        self.v = 0
        self.items: dict = {}

    def _change(self, cause, action, at, timer=None, effect=None):
        self.v += 1
        c = {"seq": len(self.changes) + 1, "feature": "todos", "version": self.v, "cause": cause, "action": action,
             "effect": effect, "time": at}
        if timer:
            c["timer"] = timer
        self.changes.append(c)
        return c

    def op(self, action, typ, version=None, key=None):
        op = self.h.invoke(process="p", kind="dispatch", session=S, entry="nginx", feature="todos", action=action, key=key)
        op.completed, op.type, op.version = time.monotonic(), typ, version
        return op

    def add(self, title, at=T0):
        c = self._change("dispatch", {"type": "add", "title": title}, at)
        self.items[str(len(self.items) + 1)] = {"id": str(len(self.items) + 1), "title": title, "done": False,
                                                "reminded": False}
        self.op(c["action"], "ok", c["version"])

    def remind(self, item, after, at, typ="ok", applied=True):
        action = {"type": "remind", "id": item, "after": after}
        if applied:
            c = self._change("dispatch", action, at)
            self.items[item]["reminded"] = False
            self.op(action, typ, c["version"] if typ == "ok" else None)
        else:
            self.op(action, typ)

    def cancel(self, item, at, typ="ok", applied=True):
        action = {"type": "cancelReminder", "id": item}
        if applied:
            c = self._change("dispatch", action, at)
            self.op(action, typ, c["version"] if typ == "ok" else None)
        else:
            self.op(action, typ)

    def fire(self, item, scheduled_at, after, at=None):
        due = scheduled_at + after * 1000
        self._change("timer", {"type": "reminderDue", "id": item}, at if at is not None else due + 3,
                     timer={"id": f"remind-{item}", "due": due, "scheduledAt": scheduled_at},
                     effect={"type": "toast", "message": f"Reminder: {self.items[item]['title']}"})
        self.items[item]["reminded"] = True

    def check(self, pending=None, final_items=None):
        state = {"items": final_items if final_items is not None else list(self.items.values()),
                 "nextId": len(self.items) + 1}
        return check_timers(self.h, {S: self.changes}, {S: (self.v, state)}, pending or {S: []})


def good() -> J:
    j = J()
    for t in ("a", "b", "c", "d", "e"):
        j.add(t)
    j.remind("1", 2, T0 + 10)                       # once
    j.remind("2", 3, T0 + 20)                       # replaced before it fires
    j.remind("3", 4, T0 + 30)                       # cancelled
    j.remind("4", 1, T0 + 40)                       # fires, then scheduled again: a new timer
    j.remind("2", 1, T0 + 500)
    j.cancel("3", T0 + 600)
    j.fire("4", T0 + 40, 1)
    j.fire("2", T0 + 500, 1)
    j.remind("4", 2, T0 + 1200)
    j.cancel("5", T0 + 1300)                        # a cancel with nothing pending does nothing
    j.fire("1", T0 + 10, 2)
    j.remind("5", 1, T0 + 1400, typ="unknown")      # unknown, applied: fires once
    j.cancel("1", T0 + 1500, typ="unknown", applied=False)
    j.fire("5", T0 + 1400, 1)
    j.fire("4", T0 + 1200, 2)
    return j


def test_a_consistent_journal_passes():
    problems, counts = good().check()
    assert problems == []
    s = summarize(counts)
    assert (s["schedules"], s["fired"], s["replaced"], s["cancelled"], s["max_firings"]) == (7, 5, 1, 1, 1)
    assert counts[f"{S}/remind-4#1"]["firings"] == 1 and counts[f"{S}/remind-4#2"]["firings"] == 1
    assert counts[f"{S}/remind-2#1"] == {"seq": 7, "after": 3, "end": "replaced", "end_seq": 10, "firings": 0}


def test_a_double_firing():
    j = good()
    j.fire("1", T0 + 10, 2, at=T0 + 5000)
    problems, counts = j.check()
    assert counts[f"{S}/remind-1#1"]["firings"] == 2
    assert any("fired at seq" in p and "a double firing" in p for p in problems), problems
    assert any("fired 2 times" in p for p in problems), problems


def test_a_lost_firing():
    j = good()
    j.remind("3", 1, T0 + 4000)       # acknowledged, never fires
    problems, counts = j.check()
    assert counts[f"{S}/remind-3#2"]["end"] == "pending"
    assert any("remind-3" in p and "lost firing" in p for p in problems), problems


def test_a_lost_firing_still_listed_as_pending():
    j = good()
    problems, _ = j.check(pending={S: [{"id": "remind-9"}]})
    assert any("still lists pending timers" in p for p in problems), problems


def test_a_firing_after_an_acknowledged_cancel():
    j = good()
    j.fire("3", T0 + 30, 4)
    problems, counts = j.check()
    assert counts[f"{S}/remind-3#1"]["firings"] == 1 and counts[f"{S}/remind-3#1"]["end"] == "cancelled"
    assert any("no longer existed" in p for p in problems), problems


def test_a_replaced_schedule_fires():
    j = J()
    j.add("a")
    j.remind("1", 3, T0)
    j.remind("1", 1, T0 + 100)
    j.fire("1", T0, 3)                 # the first schedule's firing, attributed to the pending one
    problems, _ = j.check()
    assert any("another schedule" in p for p in problems), problems


def test_a_firing_before_its_due_time():
    j = J()
    j.add("a")
    j.remind("1", 2, T0)
    j.fire("1", T0, 2, at=T0 + 1900)
    problems, _ = j.check()
    assert any("before its due time" in p for p in problems), problems


def test_reminded_must_follow_the_journal():
    j = good()
    items = [dict(i) for i in j.items.values()]
    items[2]["reminded"] = True        # item 3 was cancelled: never reminded
    problems, _ = j.check(final_items=items)
    assert any("item 3 has reminded True" in p for p in problems), problems


def test_an_acknowledged_schedule_missing_from_the_journal():
    j = good()
    j.remind("1", 2, T0, typ="ok", applied=False)
    j.h.ops[-1].version = 3            # answered as v3, which is an add
    problems, _ = j.check()
    assert any("acknowledged as todos v3" in p for p in problems), problems
    assert any("must lie between" in p for p in problems), problems


def test_an_unknown_cancel_applied_twice():
    j = good()
    j.cancel("4", T0 + 7000, typ="unknown")
    j.cancel("4", T0 + 7001, typ="ok")
    j.changes[-1]["action"] = dict(j.changes[-2]["action"])
    j.changes.append(dict(j.changes[-1], seq=len(j.changes) + 1, version=j.v + 1))   # applied once more
    j.v += 1
    problems, _ = j.check()
    assert any("3 in the journal" in p and "1 acknowledged, 1 unknown" in p for p in problems), problems


def test_a_truncated_journal_is_a_problem():
    j = good()
    problems, _ = check_timers(j.h, {S: j.changes[3:]}, {S: (j.v, {"items": list(j.items.values())})}, {S: []},
                               truncated={S: 4})
    assert any("truncated" in p for p in problems) and any("not 1.." in p for p in problems), problems
