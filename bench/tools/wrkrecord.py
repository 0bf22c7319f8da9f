#!/usr/bin/env python3
"""Turns one raw wrk output (with the WRKJSON line from bench/wrk/report.lua) into a results
record. The raw file starts with the command line ("$ wrk ...").

    wrkrecord.py --name N --target nginx|server|durable|peer --raw FILE --results results.jsonl
                 [--pid SERVER_PID]
"""

import argparse
import json
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
import rawhttp  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--scenario")
    ap.add_argument("--phase")
    ap.add_argument("--round", type=int, default=1)
    ap.add_argument("--raw", required=True)
    ap.add_argument("--results", required=True)
    ap.add_argument("--pid", type=int)
    ap.add_argument("--sessions", type=int)
    ap.add_argument("--part", type=int, help="one of several wrk run at once (report.py adds them up)")
    a = ap.parse_args()
    text = open(a.raw, errors="replace").read()
    rec = {"kind": "wrk", "name": a.name, "scenario": a.scenario or a.name, "phase": a.phase,
           "round": a.round, "target": a.target, "raw": a.raw}
    if text.startswith("$ "):
        rec["cmd"] = text.splitlines()[0][2:]
    for line in text.splitlines():
        if line.startswith("WRKJSON "):
            rec.update(json.loads(line[8:]))
    if "rps" not in rec:
        rec["failed"] = True
        rec["tail"] = text[-500:]
    if a.part is not None:
        rec["part"] = a.part
    if a.sessions is not None:
        rec["sessions"] = a.sessions
    if a.pid:
        rec["rss_kib"] = rawhttp.rss_kib(a.pid)
    rawhttp.emit(a.results, rec)


if __name__ == "__main__":
    main()
