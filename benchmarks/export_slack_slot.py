"""Benchmark (issue 33): export's work on a multi-stream graph with recorded edges, the critical
path slack a whole-args template slot against not.

    python benchmarks/export_slack_slot.py [--replays 3000] [--rounds 5]

The demo's ``two_branch`` graph (two kernels on two streams, then a third that waits for both),
its recorded edges added (0 -> 2, 1 -> 2), replayed ``--replays`` times with kernel durations
jittered by up to 30% so each replay's off-path kernel has its own slack, as on a GPU. Arms,
alternating each round, as ``pga.export`` runs after torch's JSON (``parse_trace_bytes`` +
``write_joined``, the collector paused):

* ``slot``: ``critical path slack ns`` among ``packets.VARYING_KEYS`` (a slot of its node's
  template, filled in C);
* ``key``: as before session 26's change, the slack part of the template key (each new slack
  a template miss, encoded in Python).

Wall seconds (medians), the whole-args template misses of one round, and whether the two arms'
outputs are the same bytes.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import datetime
import gzip
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfetto_graph_ann._resources import demo_data_dir  # noqa: E402
from perfetto_graph_ann.annotations.files import load_annotations  # noqa: E402
from perfetto_graph_ann.annotations.model import GraphEdge  # noqa: E402
from perfetto_graph_ann.join.model import SLACK_ARG  # noqa: E402
from perfetto_graph_ann.pipeline.convert import write_joined  # noqa: E402
from perfetto_graph_ann.read.kineto import parse_trace_bytes  # noqa: E402
from perfetto_graph_ann.write.perfetto import fast_args, fast_encoder  # noqa: E402
from perfetto_graph_ann.write.pftrace import paused_gc  # noqa: E402

_FIRST = 1280  # the fixture's first replay (launch correlation)


def trace_bytes(replays: int, seed: int = 1) -> bytes:
    """The two-branch trace with its first replay repeated ``replays`` times, 500 us apart."""
    doc = json.loads(gzip.decompress((demo_data_dir() / "two_branch.trace.json.gz").read_bytes()))
    events = doc["traceEvents"]

    def of_replay(e: dict) -> bool:
        return e.get("args", {}).get("correlation") == _FIRST or (e.get("cat") == "ac2g" and e.get("id") == _FIRST)

    def replay_work(e: dict) -> bool:
        return e.get("cat") in ("kernel", "ac2g") or e.get("name") == "cudaGraphLaunch"

    one = [e for e in events if of_replay(e)]
    out = [e for e in events if not replay_work(e)]
    rnd = random.Random(seed)
    for r in range(replays):
        corr = 10_000 + r
        for e in one:
            x = copy.deepcopy(e)
            x["ts"] = round(e["ts"] + 500.0 * (r + 1), 3)
            if x.get("cat") == "kernel":
                x["dur"] = round(e["dur"] * (1 + 0.3 * rnd.random()), 3)
            if "correlation" in x.get("args", {}):
                x["args"]["correlation"] = corr
            if x.get("cat") == "ac2g":
                x["id"] = corr
            out.append(x)
    doc["traceEvents"] = out
    return json.dumps(doc).encode()


def _arm(slot: bool) -> None:
    keys = fast_args.VARYING_KEYS | {SLACK_ARG} if slot else fast_args.VARYING_KEYS - {SLACK_ARG}
    fast_args.VARYING_KEYS = fast_encoder.VARYING_KEYS = keys
    fast_encoder._VARYING_ORDER = tuple(sorted(keys))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replays", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    data = trace_bytes(args.replays)
    ann = load_annotations(str(demo_data_dir() / "two_branch.capture.json"))
    g = dataclasses.replace(ann.graphs[0], edges=(GraphEdge(0, 2), GraphEdge(1, 2)))
    ann = dataclasses.replace(ann, graphs=(g,), replays=None)
    saved = (fast_args.VARYING_KEYS, fast_encoder.VARYING_KEYS, fast_encoder._VARYING_ORDER)
    misses = {}
    real_miss = fast_encoder.FastEncoder._miss

    def counted(self, a, ck):
        misses[arm] = misses.get(arm, 0) + 1
        return real_miss(self, a, ck)

    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, load {os.getloadavg()[0]:.2f}; "
          f"{args.replays} replays, {3 * args.replays} kernels, {len(data) / 1e6:.1f} MB of JSON")
    times: dict = {"slot": [], "key": []}
    out = {}
    fast_encoder.FastEncoder._miss = counted
    try:
        with tempfile.TemporaryDirectory(prefix="pga-slack-slot-") as tmp:
            for r in range(args.rounds):
                for arm in ("slot", "key"):
                    _arm(arm == "slot")
                    misses[arm] = 0
                    dst = os.path.join(tmp, f"{arm}.pftrace")
                    t = time.perf_counter()
                    with paused_gc():
                        layout = write_joined(parse_trace_bytes(data, "bench"), dst, ann, "all")
                    times[arm].append(time.perf_counter() - t)
                    out[arm] = Path(dst).read_bytes()
                    assert layout.report.critical_paths.get("edges") == args.replays
    finally:
        fast_encoder.FastEncoder._miss = real_miss
        fast_args.VARYING_KEYS, fast_encoder.VARYING_KEYS, fast_encoder._VARYING_ORDER = saved
    med = {k: statistics.median(v) for k, v in times.items()}
    print("| arm | median s | best s | template misses | same bytes |")
    print("| --- | ---: | ---: | ---: | --- |")
    same = "yes" if out["slot"] == out["key"] else "NO"
    for k in ("slot", "key"):
        print(f"| {k} | {med[k]:.3f} | {min(times[k]):.3f} | {misses[k]:,} | {same} |")
    print(f"| slot / key | {med['slot'] / med['key']:.2f}x | | | |")


if __name__ == "__main__":
    main()
