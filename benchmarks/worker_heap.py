"""Benchmark (issue 33): a conversion worker's one conversion, glibc's malloc kept or not.

    python benchmarks/worker_heap.py TRACE.json[.gz] ANNOTATIONS.json [--rounds 8] [--repeat 2]

A background worker (``capture/background.py``) is a fresh process that converts one profile and
leaves. Each round starts two such processes, in alternating order: ``kept`` calls
``util.heap.keep_freed_memory()`` first (as the worker does unless
``PERFETTO_GRAPH_ANN_WORKER_HEAP=off``), ``default`` leaves glibc's malloc as it is. Each then does
the worker's warm-up (``background._warm``), loads the annotations and builds their per-graph
values (``join.ahead.prepare_graphs``, done while torch writes), and times
``write_joined_file`` of the trace (two passes, the join, ``.pftrace``; the collector paused),
``--repeat`` times (the first is the worker's; later ones show a process's steady state). Reports
the medians of each conversion's ms, the kept / default ratio of the first, and each process's
peak RSS. A gzip trace is decompressed into the temporary folder first (torch writes plain JSON).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.proc import plain_copy, run_child  # noqa: E402

_CHILD = r'''
import json, os, resource, sys, time
if sys.argv[1] == "kept":
    from perfetto_graph_ann.util.heap import keep_freed_memory
    assert keep_freed_memory()
from perfetto_graph_ann.capture import background
background._warm()
from perfetto_graph_ann.annotations.files import load_annotations
from perfetto_graph_ann.join.ahead import prepare_graphs
from perfetto_graph_ann.pipeline.convert import write_joined_file
from perfetto_graph_ann.util.collector import paused_gc
ms = []
for i in range(int(sys.argv[5])):
    ann = load_annotations(sys.argv[3])
    prepare_graphs(ann)
    t0 = time.perf_counter()
    with paused_gc():
        write_joined_file(sys.argv[2], sys.argv[4], ann, "all", 7, False, "profile")
    ms.append(1e3 * (time.perf_counter() - t0))
print(json.dumps({"ms": ms, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("annotations")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    got = {"kept": [], "default": []}
    with tempfile.TemporaryDirectory() as d:
        src = plain_copy(args.trace, d)
        out = os.path.join(d, "out.pftrace")
        for r in range(args.rounds):
            for arm in (("kept", "default") if r % 2 == 0 else ("default", "kept")):
                res = run_child(_CHILD, [arm, src, args.annotations, out, args.repeat], ROOT)
                if "error" in res:
                    raise SystemExit(f"the {arm} process failed: {res['error']}")
                got[arm].append(res)
    print(f"{platform.machine()}, Python {platform.python_version()}, glibc {platform.libc_ver()[1]}, "
          f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC; {Path(args.trace).name}, {args.rounds} rounds")
    print("| arm | first conversion ms (median) | later ones ms (median) | peak RSS MB (median) |")
    print("| --- | ---: | ---: | ---: |")
    first = {}
    for arm, runs in got.items():
        first[arm] = statistics.median(x["ms"][0] for x in runs)
        later = [m for x in runs for m in x["ms"][1:]]
        print(f"| {arm} | {first[arm]:.1f} | {statistics.median(later):.1f} | "
              f"{statistics.median(x['peak_mb'] for x in runs):.0f} |" if later else
              f"| {arm} | {first[arm]:.1f} | - | {statistics.median(x['peak_mb'] for x in runs):.0f} |")
    print(f"first conversion, kept / default: {first['kept'] / first['default']:.3f}")
    print("rounds (first conversion ms): " + json.dumps({a: [round(x["ms"][0], 1) for x in v] for a, v in got.items()}))


if __name__ == "__main__":
    main()
