"""The checker on hand-made histories: a consistent one passes; each kind of violation fails it."""

import time

from harness import http
from harness.checker import check
from harness.history import History, StreamRecord

S = "session-aaaaaaaaaaaaaa"


def todos(n, titles=None):
    titles = titles or [f"t{i}" for i in range(1, n + 1)]
    return {"items": [{"id": str(i + 1), "title": t, "done": False} for i, t in enumerate(titles)], "nextId": n + 1}


def add(h, title, typ="ok", version=None, state=None, key=None, code=None, status=None, entry="A"):
    op = h.invoke(process="p", kind="dispatch", session=S, entry=entry, feature="todos",
                  action={"type": "add", "title": title}, key=key, title=title)
    op.completed, op.type, op.version, op.state, op.code, op.status = time.monotonic(), typ, version, state, code, status
    return op


def inc(h, typ="ok", version=None, key=None):
    op = h.invoke(process="p", kind="dispatch", session=S, entry="A", feature="counter", action={"type": "increment"}, key=key)
    op.completed, op.type, op.version = time.monotonic(), typ, version
    op.state = {"count": version} if version else None
    return op


def stream(h, events, resumed_from=None, final=False):
    rec = StreamRecord(name=f"s{len(h.streams)}", session=S, entry="B", resumed_from=resumed_from, features=None)
    rec.events = [http.Event(i, e, d, 0.0) for i, e, d in events]
    rec.final = final
    h.streams.append(rec)
    return rec


def snap(seq, tv, cv=0):
    return (seq, "snapshot", {"features": {"todos": {"version": tv, "state": todos(tv)},
                                           "counter": {"version": cv, "state": {"count": cv}}}})


def ev(seq, v):
    return (seq, "state", {"feature": "todos", "version": v, "state": todos(v)})


def good():
    h = History()
    add(h, "t1", version=1, state=todos(1), key="k1")
    add(h, "t1", version=1, state=todos(1), key="k1")  # an idempotent replay
    add(h, "t2", "unknown")
    add(h, "t3", version=3, state=todos(3))
    add(h, "t9", "fail", code="write_contention", status=503)
    inc(h, version=1)
    inc(h, "unknown")
    stream(h, [snap(0, 0), ev(1, 1), ev(2, 2), ev(3, 3)])
    stream(h, [ev(3, 3), (4, "state", {"feature": "counter", "version": 1, "state": {"count": 1}})], resumed_from=2, final=True)
    final = {S: {"todos": (3, todos(3)), "counter": (1, {"count": 1}), "login": (0, {"isLoading": False})}}
    pg = {S: {"head_seq": 4, "stores": {"todos": 3, "counter": 1}, "seqs": [2, 3, 4]}}
    return h, final, pg


def test_a_consistent_history_passes():
    h, final, pg = good()
    assert check(h, final, pg, replay_buffer=3) == []


def test_an_acknowledged_change_lost():
    h, final, pg = good()
    final[S]["todos"] = (2, todos(2, ["t2", "t3"]))
    problems = check(h, final)
    assert any("'t1'" in p and "(lost)" in p for p in problems), problems


def test_an_acknowledged_change_applied_twice():
    h, final, pg = good()
    final[S]["todos"] = (4, todos(4, ["t1", "t2", "t3", "t1"]))
    problems = check(h, final)
    assert any("'t1'" in p and "more than once" in p for p in problems), problems


def test_nothing_applied_but_it_was():
    h, final, pg = good()
    final[S]["todos"] = (4, todos(4, ["t1", "t2", "t3", "t9"]))
    problems = check(h, final)
    assert any("'t9'" in p and "nothing applied" in p for p in problems), problems


def test_a_change_nobody_sent():
    h, final, pg = good()
    final[S]["todos"] = (4, todos(4, ["t1", "t2", "t3", "ghost"]))
    assert any("no client sent it" in p for p in check(h, final))


def test_two_states_for_one_version():
    h, final, pg = good()
    add(h, "t4", version=3, state=todos(3, ["t1", "t2", "t4"]))
    problems = check(h, final)
    assert any("two states" in p and "v3" in p for p in problems), problems


def test_two_acknowledged_changes_same_version():
    h, final, pg = good()
    inc(h, version=1)  # a second increment acknowledged as version 1 too: same state, lost update
    problems = check(h, final)
    assert any("different acknowledged changes" in p for p in problems), problems


def test_counter_version_outside_bounds():
    h, final, pg = good()
    final[S]["counter"] = (3, {"count": 3})  # 1 ok + 1 unknown, version 3: a failed one applied
    assert any("must lie between" in p for p in check(h, final))


def test_a_gap_in_a_stream():
    h, final, pg = good()
    stream(h, [snap(0, 0), ev(1, 1), ev(3, 3)])
    problems = check(h, final)
    assert any("a gap" in p for p in problems), problems


def test_a_repeated_event():
    h, final, pg = good()
    stream(h, [snap(0, 0), ev(1, 1), ev(1, 1), ev(2, 2)])
    assert any("out of order or repeated" in p or "not after" in p for p in check(h, final))


def test_a_stream_that_does_not_start_with_a_snapshot():
    h, final, pg = good()
    stream(h, [ev(1, 1)])
    assert any("not a snapshot" in p for p in check(h, final))


def test_a_final_stream_that_stopped_early():
    h, final, pg = good()
    stream(h, [snap(0, 0), ev(1, 1)], final=True)
    problems = check(h, final, pg)
    assert any("open at the end stopped at id 1" in p for p in problems), problems


def test_a_version_skipped_inside_a_state():
    h, final, pg = good()
    add(h, "t4", version=4, state=todos(3, ["t1", "t2", "t3"]) | {"nextId": 5})
    assert any("not the items 1..4" in p for p in check(h, final))


def test_a_store_left_waiting():
    h, final, pg = good()
    final[S]["login"] = (1, {"isLoading": True})
    assert any("left waiting" in p for p in check(h, final))


def test_postgres_head_behind_the_api():
    h, final, pg = good()
    pg[S]["stores"]["todos"] = 2
    assert any("PostgreSQL's head" in p for p in check(h, final, pg))


def test_postgres_hole_in_the_journal_tail():
    h, final, pg = good()
    pg[S]["seqs"] = [2, 4]
    assert any("misses seqs [3]" in p for p in check(h, final, pg, replay_buffer=3))


def test_rows_left_after_delete():
    h, final, pg = good()
    assert any("left rows behind" in p for p in check(h, final, deleted={S: {"state_changes": 2}}))


def test_one_key_two_different_answers():
    h, final, pg = good()
    add(h, "t1", version=2, state=todos(2, ["t1", "t1"]), key="k1")
    problems = check(h, final)
    assert any("key k1" in p for p in problems), problems
