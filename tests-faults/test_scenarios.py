"""Workloads under faults, each history checked by the checker (harness/checker.py).

Concurrent clients (todos adds with unique titles, keyed or not, counter increments, reads)
through nginx and straight at every node, one event stream per session resumed elsewhere with
Last-Event-ID when it ends; replayBuffer 20 and snapshotEvery 5 so compaction runs all along.
Each fault is injected once the load is running and healed once the others have shown they
keep serving (conditions with deadlines, never fixed sleeps). FAULTS_RUNS repeats each one."""

import asyncio
import os
import time

import pytest

from conftest import LONG
from harness.history import History
from harness.run import eventually, finish_and_check
from harness.workload import Workload, create_session

RUNS = int(os.environ.get("FAULTS_RUNS", "3" if LONG else "1"))
OPS = 20000 if LONG else 6000   # a bound; the load runs until the scenario stops it
SESSIONS = 6 if LONG else 4


def entries(c, nginx=True):
    out = [(n.name, n.front.port) for n in c.nodes]
    return ([("nginx", c.nginx_port)] if nginx else []) + out


async def start_load(c, seed, ops=OPS):
    await c.wait_ready()
    h = History()
    sessions = [await create_session(c.nginx_port) for _ in range(SESSIONS)]
    w = Workload(h, sessions, entries(c), workers=8, max_ops=ops, seed=seed)
    w.start()
    await eventually(lambda: w.acknowledged() >= 40, 60, what="load running")
    return h, sessions, w


async def more_acks(w, n, after, entries_=None, timeout=60, cluster=None):
    def enough():
        if entries_ is None:
            return w.acknowledged(after) >= n
        return all(w.acknowledged(after, e) >= n for e in entries_)
    try:
        await eventually(enough, timeout, what=f"{n} more acknowledged changes")
    except AssertionError as e:
        counts = {name: w.acknowledged(after, name) for name, _ in w.entries}
        recent = [(op.entry, op.session[:6], op.status, op.code, op.error and op.error[-40:])
                  for op in w.h.ops[-12:]]
        diag = cluster.diagnose() if cluster is not None else ""
        raise AssertionError(f"{e}; acknowledged since, per entry: {counts}; last operations: {recent}\n"
                             f"PostgreSQL sessions:\n{diag}") from None


@pytest.mark.parametrize("balance", ["round_robin", "hash"])
@pytest.mark.parametrize("run", range(RUNS), ids=lambda r: f"run{r + 1}")
@pytest.mark.long
def test_node_killed_and_restarted(make_cluster, balance, run):
    """SIGKILL of node C under load; the others keep serving; C comes back on a new port
    (nginx reaches it through its proxy) and serves again."""
    async def body():
        c = make_cluster(balance=balance)
        h, sessions, w = await start_load(c, seed=100 + run)
        c.nodes[2].kill()
        t = time.monotonic()
        await more_acks(w, 5, t, ["nginx", "A", "B"], cluster=c)
        c.nodes[2].start()
        await c.wait_ready()
        t = time.monotonic()
        await more_acks(w, 3, t, ["C"], cluster=c)
        await finish_and_check(f"kill-{balance}-{run + 1}", c, h, sessions, w)
    asyncio.run(body())


@pytest.mark.parametrize("run", range(RUNS), ids=lambda r: f"run{r + 1}")
def test_owner_killed_fails_over_early(make_cluster, run):
    """SIGKILL of node C under load with the default 10 s lease (issue 39): the sessions C
    owned answer again through the other nodes within 2 s, not after the lease, because C's
    liveness lock went with its process; every acknowledged change is kept."""
    async def body():
        c = make_cluster(node_env={"STATE_SERVER_CLUSTER_LEASE": "10"})
        await c.wait_ready()
        h = History()
        # Two sessions made on C (so C owns some), two through nginx.
        sessions = [await create_session(c.nodes[2].front.port) for _ in range(2)]
        sessions += [await create_session(c.nginx_port) for _ in range(2)]
        w = Workload(h, sessions, entries(c), workers=8, max_ops=3000, seed=800 + run)
        w.start()
        await eventually(lambda: w.acknowledged() >= 40, 60, what="load running")
        port = c.nodes[2].port
        owned = {r[0] for r in c.sql("SELECT s.id FROM state_sessions s JOIN state_nodes n ON n.epoch = s.owner "
                                     f"WHERE n.url = 'http://127.0.0.1:{port}'")}
        theirs = [s.id for s in sessions if s.id in owned]
        assert theirs, "C owns none of the sessions"
        c.nodes[2].kill()
        t = time.monotonic()

        def first_served(sid):
            done = [op.completed for op in h.ops if op.kind == "dispatch" and op.type == "ok" and op.session == sid
                    and op.invoked >= t and op.completed is not None]
            return min(done) - t if done else None

        await eventually(lambda: all(first_served(sid) is not None for sid in theirs), 30,
                         what="C's sessions served again")
        took = max(first_served(sid) for sid in theirs)
        print(f"FAULTS failover after SIGKILL (lease 10 s): {len(theirs)} sessions of C served again within {took:.3f} s")
        assert took < 5, f"C's sessions waited {took:.3f} s (the lease is 10 s)"
        await more_acks(w, 5, t, ["A", "B"], cluster=c)
        await finish_and_check(f"kill-early-{run + 1}", c, h, sessions, w, skip_nodes={"C"})
    asyncio.run(body())


@pytest.mark.parametrize("run", range(RUNS), ids=lambda r: f"run{r + 1}")
@pytest.mark.long
def test_node_paused_past_timeouts(make_cluster, run):
    """SIGSTOP of node B under load, until clients of B have timed out (8 s, past
    PostgreSQL's connection wait of 5 s) and the others made progress; then SIGCONT. Whatever
    B had in flight must not land behind the others' changes."""
    async def body():
        c = make_cluster()
        h, sessions, w = await start_load(c, seed=200 + run)
        c.nodes[1].pause()
        t = time.monotonic()
        await eventually(lambda: any(op.entry == "B" and op.type == "unknown" and op.invoked >= t for op in h.ops)
                         or w.done_ops >= w.max_ops, 60, what="a client of the paused node timed out")
        await more_acks(w, 10, t, ["A", "C"], cluster=c)
        c.nodes[1].resume()
        t = time.monotonic()
        await more_acks(w, 3, t, ["B"], cluster=c)
        await finish_and_check(f"pause-{run + 1}", c, h, sessions, w)
    asyncio.run(body())


@pytest.mark.parametrize("run", range(RUNS), ids=lambda r: f"run{r + 1}")
@pytest.mark.long
def test_node_black_holed_from_postgres(make_cluster, run):
    """The proxy between node A and PostgreSQL black-holes (no reset, no answer, both ways)
    under load, then heals; the other nodes keep serving meanwhile."""
    async def body():
        c = make_cluster()
        h, sessions, w = await start_load(c, seed=300 + run)
        c.nodes[0].pg_proxy.set("blackhole")
        t = time.monotonic()
        await more_acks(w, 10, t, ["B", "C"], cluster=c)
        await eventually(lambda: any(op.entry == "A" and op.type != "ok" and op.invoked >= t for op in h.ops)
                         or w.done_ops >= w.max_ops, 60, what="a client of A without an answer")
        c.nodes[0].pg_proxy.heal()
        # Connections held in the hole are cut, as a partition's end often does.
        c.nodes[0].pg_proxy.cut()
        t = time.monotonic()
        await c.wait_ready(timeout=60)
        await more_acks(w, 3, t, ["A"], cluster=c)
        await finish_and_check(f"blackhole-pg-{run + 1}", c, h, sessions, w)
    asyncio.run(body())


@pytest.mark.parametrize("run", range(RUNS), ids=lambda r: f"run{r + 1}")
@pytest.mark.long
def test_node_black_holed_from_nginx(make_cluster, run):
    """The proxy between nginx (and B's direct clients) and node B black-holes: requests to it
    hang until the clients' timeout, then it heals."""
    async def body():
        c = make_cluster()
        h, sessions, w = await start_load(c, seed=400 + run)
        c.nodes[1].front.set("blackhole")
        t = time.monotonic()
        await eventually(lambda: any(op.entry == "B" and op.type == "unknown" and op.invoked >= t for op in h.ops)
                         or w.done_ops >= w.max_ops, 60, what="a client of B timed out")
        await more_acks(w, 10, t, ["A", "C"], cluster=c)
        c.nodes[1].front.heal()
        t = time.monotonic()
        await more_acks(w, 3, t, ["B"], cluster=c)
        await finish_and_check(f"blackhole-front-{run + 1}", c, h, sessions, w)
    asyncio.run(body())


@pytest.mark.parametrize("run", range(RUNS), ids=lambda r: f"run{r + 1}")
@pytest.mark.long
def test_postgres_restarted(make_cluster, run):
    """PostgreSQL stopped (fast shutdown: every connection ends) under load and started again."""
    async def body():
        c = make_cluster()
        h, sessions, w = await start_load(c, seed=500 + run)
        c.pg_stop()
        t = time.monotonic()
        await eventually(lambda: any(op.kind == "dispatch" and op.type != "ok" and op.invoked >= t for op in h.ops)
                         or w.done_ops >= w.max_ops, 30, what="a change refused while PostgreSQL is down")
        c.pg_start()
        await c.wait_ready(timeout=60)
        t = time.monotonic()
        await more_acks(w, 20, t, cluster=c)
        await finish_and_check(f"pg-restart-{run + 1}", c, h, sessions, w)
    asyncio.run(body())


@pytest.mark.long
def test_cut_connections_to_postgres_under_load(make_cluster):
    """Every node's connections to PostgreSQL cut at once, three times, under load (a reset,
    not a black hole): some commits land unheard."""
    async def body():
        c = make_cluster()
        h, sessions, w = await start_load(c, seed=600)
        for _ in range(3):
            for n in c.nodes:
                n.pg_proxy.cut()
            t = time.monotonic()
            await more_acks(w, 15, t, cluster=c)
        await finish_and_check("cut-pg", c, h, sessions, w)
    asyncio.run(body())


@pytest.mark.parametrize("balance", ["round_robin", pytest.param("hash", marks=pytest.mark.long)])
def test_mixed_faults(make_cluster, balance):
    """One load, one fault after another (the short form's scenario; the long form also runs
    each alone): SIGKILL of C and its restart, A black-holed from PostgreSQL and healed (long
    form only), B paused past the clients' timeout and resumed, PostgreSQL restarted."""
    async def body():
        c = make_cluster(balance=balance)
        h, sessions, w = await start_load(c, seed=700 if balance == "hash" else 701)
        c.nodes[2].kill()
        t = time.monotonic()
        await more_acks(w, 5, t, ["A", "B"], cluster=c)
        c.nodes[2].start()
        await c.wait_ready()
        if LONG:
            # Left out of the short form: cutting A's connections after the black hole hits the
            # hang of test_finding_session_hangs_after_lost_write_reply in about half the runs.
            c.nodes[0].pg_proxy.set("blackhole")
            t = time.monotonic()
            await more_acks(w, 10, t, ["B", "C"], cluster=c)
            c.nodes[0].pg_proxy.heal()
            c.nodes[0].pg_proxy.cut()
            await c.wait_ready(timeout=60)
        c.nodes[1].pause()
        t = time.monotonic()
        await eventually(lambda: any(op.entry == "B" and op.type == "unknown" and op.invoked >= t for op in h.ops),
                         60, what="a client of the paused node timed out")
        c.nodes[1].resume()
        await c.wait_ready(timeout=60)
        c.pg_stop()
        t = time.monotonic()
        await eventually(lambda: any(op.kind == "dispatch" and op.type != "ok" and op.invoked >= t for op in h.ops),
                         30, what="a change refused while PostgreSQL is down")
        c.pg_start()
        await c.wait_ready(timeout=60)
        t = time.monotonic()
        await more_acks(w, 20, t, cluster=c)
        await finish_and_check(f"mixed-{balance}", c, h, sessions, w)
    asyncio.run(body())
