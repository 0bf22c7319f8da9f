#!/usr/bin/env python3
"""SQLite group commits during a load run, from the server's /metrics read before and after it.

    commitstats.py --url http://127.0.0.1:PORT --mark FILE             (before the run)
    commitstats.py --url http://127.0.0.1:PORT --since FILE --name N [--scenario S --round R]
                   [--results F]                                        (after it)

From the differences of the histograms (docs/METRICS.md):
  * stateserver_storage_commit_duration_seconds: each group commit, BEGIN to the end of COMMIT
    (the fsync): commits, mean and p99 (the bucket's upper bound) in ms;
  * stateserver_storage_commit_batches: changes written by each group commit: mean batch;
  * stateserver_storage_commit_latency_seconds: how long a change waited until it was durable
    (queueing for a group commit included): mean and p99 in ms;
  * stateserver_dispatch_duration_seconds: dispatches answered meanwhile.
"""

import argparse
import json
import sys
import urllib.request

sys.path.insert(0, __import__("os").path.dirname(__file__))
import rawhttp  # noqa: E402

HISTOGRAMS = ("stateserver_storage_commit_duration_seconds", "stateserver_storage_commit_batches",
              "stateserver_storage_commit_latency_seconds", "stateserver_dispatch_duration_seconds")


def scrape(url):
    rawhttp.split_url(url)  # loopback only
    text = urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        name, _, value = line.rpartition(" ")
        base = name.split("{", 1)[0]
        if not any(base.startswith(h) for h in HISTOGRAMS):
            continue
        try:
            out[name] = float(value)
        except ValueError:
            pass
    return out


def hist(d, name):
    """count, sum and [(upper bound, cumulative count)] of one histogram (differences)."""
    buckets = []
    for k, v in d.items():
        if k.startswith(name + "_bucket{le=\""):
            le = k.split("le=\"", 1)[1].split("\"", 1)[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), v))
    buckets.sort()
    return d.get(name + "_count", 0.0), d.get(name + "_sum", 0.0), buckets


def quantile(buckets, count, q):
    """The upper bound of the bucket that holds the q-quantile (Prometheus-style, no interpolation)."""
    if not count:
        return None
    want = q * count
    for le, c in buckets:
        if c >= want:
            return le
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--mark")
    ap.add_argument("--since")
    ap.add_argument("--name")
    ap.add_argument("--scenario")
    ap.add_argument("--round", type=int, default=1)
    ap.add_argument("--results")
    a = ap.parse_args()
    now = scrape(a.url)
    if a.mark:
        with open(a.mark, "w") as f:
            json.dump(now, f)
        return
    before = json.load(open(a.since))
    d = {k: v - before.get(k, 0.0) for k, v in now.items()}
    rec = {"kind": "commit", "name": a.name or "commit", "scenario": a.scenario, "round": a.round}
    n, s, b = hist(d, "stateserver_storage_commit_duration_seconds")
    rec["commits"] = int(n)
    rec["commit_mean_ms"] = round(1000 * s / n, 3) if n else None
    p99 = quantile(b, n, 0.99)
    rec["commit_p99_le_ms"] = None if p99 is None or p99 == float("inf") else round(1000 * p99, 3)
    n2, s2, _ = hist(d, "stateserver_storage_commit_batches")
    rec["batches"] = int(s2)
    rec["mean_batch"] = round(s2 / n2, 2) if n2 else None
    n3, s3, b3 = hist(d, "stateserver_storage_commit_latency_seconds")
    rec["latency_mean_ms"] = round(1000 * s3 / n3, 3) if n3 else None
    p99 = quantile(b3, n3, 0.99)
    rec["latency_p99_le_ms"] = None if p99 is None or p99 == float("inf") else round(1000 * p99, 3)
    n4, _, _ = hist(d, "stateserver_dispatch_duration_seconds")
    rec["dispatches"] = int(n4)
    rawhttp.emit(a.results, rec)


if __name__ == "__main__":
    main()
