"""What every test ends with: heal, settle, read the final state on every node and in
PostgreSQL, let the last streams catch up, run the checker, keep the history, report."""

from __future__ import annotations

import asyncio
import json
import os
import time

from . import checker
from .cluster import REPO
from .workload import settle_and_read

ARTIFACTS = os.path.join(REPO, "test-artifacts", "faults")


def heal(cluster) -> None:
    for node in cluster.nodes:
        if node.paused:
            node.resume()
        for p in (node.pg_proxy, node.front):
            if p is not None:
                p.heal()


async def eventually(predicate, timeout: float, every: float = 0.1, what: str = "condition"):
    """Polls `predicate` (sync or async) until it is true; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        await asyncio.sleep(every)


async def finish_and_check(name: str, cluster, history, sessions, workload=None, deleted=None,
                           todos_add_only: bool = True, skip_nodes=frozenset()) -> dict:
    if workload is not None:
        await workload.finish()
    heal(cluster)
    final = await settle_and_read(cluster, history, sessions, skip_nodes=skip_nodes)
    pg = cluster.pg_facts(sessions)
    if workload is not None:
        await workload.drain_streams({sid: f["head_seq"] for sid, f in pg.items()})
    rb = int(cluster.node_env.get("STATE_SERVER_REPLAY_BUFFER", "0")) or None
    problems = checker.check(history, final, pg, deleted, todos_add_only, rb)
    summary = history.summary()
    os.makedirs(ARTIFACTS, exist_ok=True)
    path = os.path.join(ARTIFACTS, f"{name}.jsonl")
    history.dump(path)
    with open(path, "a") as f:
        f.write(json.dumps({"final": final, "postgres": pg, "problems": problems}) + "\n")
    report = {"test": name, "ops": len(history.ops), **summary, "problems": len(problems),
              "final_versions": {sid[:8]: {f: v for f, (v, _) in feats.items()} for sid, feats in final.items()}}
    print("FAULTS " + json.dumps(report))
    assert not problems, f"{len(problems)} problems (history in {path}):\n" + "\n".join(problems[:30])
    return report
