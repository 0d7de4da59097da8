"""Critical path benchmark: 1,000 replays of a 1,000-node graph (synthetic), issue 35.

The graph: 10 blocks, each a fork kernel, an empty node, 4 concurrent branches of 24 kernels
on 4 streams (branch b's kernels last 2 + 3b us, so branch 3 is the longest), a join
kernel and an event-record node: 980 kernels, 20 other nodes, 1,000 nodes, 1,029 edges. Each replay runs every
kernel 1 us after its last predecessor ends (durations jittered per replay), the
replays back to back. The trace carries ``graph node id`` (exact join).

Times, in one run:
- ``core``: :func:`~perfetto_graph_ann.join.critical_path.edges_path` on every replay (the
  graph's predecessors computed once), and the stream-order path for comparison;
- ``join``: ``join()`` with the graph's edges minus ``join()`` without (what the join's hook
  costs: path, slack, args), and the dependency flows' collection (``edge_flows=True``);
- ``convert``: ``.pftrace`` size and time without / with the dependency flows, on a smaller
  trace (``--flow-replays``);
- ``sql``: ``INCLUDE PERFETTO MODULE graph_ann.critical_path`` on the portable engine, on the
  converted trace of ``--sql-replays`` replays (edges, then stream order).

    python benchmarks/critical_path.py --replays 1000 --flow-replays 100 --sql-replays 100
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

from perfetto_graph_ann.annotations.model import AnnotationSet, GraphEdge, GraphRecord, NodeRecord
from perfetto_graph_ann.join import critical_path as cp
from perfetto_graph_ann.join import join
from perfetto_graph_ann.pipeline.convert import convert
from perfetto_graph_ann.read.kineto import read_trace

EXEC_ID = 7
BLOCKS, BRANCHES, CHAIN = 10, 4, 24


def graph() -> Tuple[GraphRecord, Dict[int, int]]:
    """The 1,000-node graph and each kernel's stream (its branch; forks and joins on stream 7)."""
    nodes: List[NodeRecord] = []
    edges: List[GraphEdge] = []
    stream: Dict[int, int] = {}
    prev_join = None

    def add(kind: str, s: int = 7) -> int:
        k = len(nodes)
        nodes.append(NodeRecord((EXEC_ID << 32) | k, kind, kernel=f"k{k}" if kind == "kernel" else None,
                                annotation={"name": f"branch {s}"} if kind == "kernel" else {}))
        if kind == "kernel":
            stream[k] = s
        return k

    for _ in range(BLOCKS):
        fork = add("kernel")
        if prev_join is not None:
            edges.append(GraphEdge(prev_join, fork))
        hub = add("empty")
        edges.append(GraphEdge(fork, hub))
        tails = []
        for b in range(BRANCHES):
            last = hub
            for _ in range(CHAIN):
                k = add("kernel", 20 + b)
                edges.append(GraphEdge(last, k))
                last = k
            tails.append(last)
        j = add("kernel")
        edges.extend(GraphEdge(t, j) for t in tails)
        rec = add("event_record")
        edges.append(GraphEdge(j, rec))
        prev_join = rec
    return GraphRecord(EXEC_ID, tuple(nodes), edges=tuple(edges), name="synthetic"), stream


def trace_doc(g: GraphRecord, stream: Dict[int, int], replays: int, seed: int = 1) -> dict:
    """Kineto JSON: per replay a ``cudaGraphLaunch`` and its kernels, scheduled on the edges."""
    rnd = random.Random(seed)
    preds: Dict[int, List[int]] = {}
    for e in g.edges:
        preds.setdefault(e.dst, []).append(e.src)
    kinds = {n.local_id: n.type for n in g.nodes}

    def ready(k: int, end: Dict[int, int]) -> int:
        return max((end[p] if kinds[p] == "kernel" else ready(p, end) for p in preds.get(k, [])), default=0)

    events = [{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
              {"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "python"}}]
    t = 1_000_000  # ns
    for r in range(replays):
        corr = r + 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 100, "tid": 100,
                       "ts": t / 1000, "dur": 5.0, "args": {"correlation": corr}})
        start = t + 8_000
        end: Dict[int, int] = {}
        for n in g.nodes:
            k = n.local_id
            if kinds[k] != "kernel":
                continue
            b = stream[k] - 20 if stream[k] != 7 else 0
            dur = (2_000 + 3_000 * b if stream[k] != 7 else 4_000) + rnd.randrange(0, 500)
            ts = max(start, ready(k, end) + 1_000)
            end[k] = ts + dur
            events.append({"ph": "X", "cat": "kernel", "name": n.kernel, "pid": 0, "tid": stream[k],
                           "ts": ts / 1000, "dur": dur / 1000,
                           "args": {"correlation": corr, "stream": stream[k], "device": 0,
                                    "graph id": EXEC_ID, "graph node id": n.key}})
        t = max(end.values()) + 2_000
    return {"traceEvents": events, "deviceProperties": [{"id": 0, "name": "synthetic"}]}


def best(fn, repeat: int):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replays", type=int, default=1000)
    ap.add_argument("--flow-replays", type=int, default=100)
    ap.add_argument("--sql-replays", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    g, stream = graph()
    kernels = sum(n.type == "kernel" for n in g.nodes)
    print(f"graph: {len(g.nodes)} nodes ({kernels} kernels), {len(g.edges)} edges; {args.replays} replays")
    with_edges = AnnotationSet((g,), source="synthetic")
    no_edges = AnnotationSet((dataclasses.replace(g, edges=None),), source="synthetic")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "t.json"
        src.write_text(json.dumps(trace_doc(g, stream, args.replays)))
        trace = read_trace(src)
        print(f"trace: {len(trace.events)} events, {src.stat().st_size / 1e6:.0f} MB")

        # core: the path of every replay, on the edges and on stream order
        from perfetto_graph_ann.join.replays import find_replays

        replays = find_replays(trace)
        items = [[cp.Item(e.index, e.ts_ns, e.ts_ns + e.dur_ns, e.stream, e.args["graph node id"] & 0xFFFFFFFF)
                  for e in r.events] for r in replays]
        t_pred, (wp, rank) = best(lambda: cp.work_predecessors(g), args.repeat)
        t_edges, paths = best(lambda: [cp.edges_path(it, wp, rank, None) for it in items], args.repeat)
        t_stream, _ = best(lambda: [cp.stream_order_path(it, None) for it in items], args.repeat)
        lengths = {len(p.items) for p in paths}
        print(f"core: predecessors once {t_pred * 1e3:.1f} ms; edges_path x{len(items)}: {t_edges:.2f} s "
              f"({t_edges / len(items) * 1e3:.2f} ms a replay; path items {sorted(lengths)}); "
              f"stream_order_path x{len(items)}: {t_stream:.2f} s")

        # join with vs without edges: the hook
        t_j0, _ = best(lambda: join(trace, no_edges, graph_lanes="all"), args.repeat)
        t_j1, lay = best(lambda: join(trace, with_edges, graph_lanes="all"), args.repeat)
        t_j2, lay_f = best(lambda: join(trace, with_edges, graph_lanes="all", edge_flows=True), 1)
        print(f"join: without edges {t_j0:.2f} s, with edges {t_j1:.2f} s (hook {t_j1 - t_j0:+.2f} s), "
              f"collecting flows too {t_j2:.2f} s ({len(lay_f.edge_flows)} flows, note: {lay_f.report.edge_flows_note})")
        assert lay.report.critical_paths == {cp.SOURCE_EDGES: args.replays}, lay.report.critical_paths
        del trace, lay, lay_f, replays, items, paths

        def converted(n: int, ann: AnnotationSet, flows: bool, tag: str) -> Tuple[Path, float]:
            p = Path(tmp) / f"s{n}.json"
            if not p.exists():
                p.write_text(json.dumps(trace_doc(g, stream, n)))
            tr = read_trace(p)
            lay = join(tr, ann, graph_lanes="all", edge_flows=flows)
            out = Path(tmp) / f"{tag}.pftrace"
            t0 = time.perf_counter()
            convert(tr, out, layout=lay)
            return out, time.perf_counter() - t0

        n = args.flow_replays
        plain, t_c0 = converted(n, no_edges, False, "plain")
        marked, t_c1 = converted(n, with_edges, False, "marked")
        flowed, t_c2 = converted(n, with_edges, True, "flows")
        print(f"convert ({n} replays): without edges {t_c0:.2f} s {plain.stat().st_size / 1e6:.2f} MB; "
              f"path args {t_c1:.2f} s {marked.stat().st_size / 1e6:.2f} MB; "
              f"+ dependency flows {t_c2:.2f} s {flowed.stat().st_size / 1e6:.2f} MB")

        from perfetto_graph_ann.query.session import open_trace

        for label, path in (("edges", marked), ("stream order", plain)):
            if args.sql_replays != n:
                path, _ = converted(args.sql_replays, with_edges if label == "edges" else no_edges, False,
                                    f"sql-{label.replace(' ', '-')}")
            t0 = time.perf_counter()
            with open_trace(path, engine="portable") as s:
                t_load = time.perf_counter() - t0
                t1 = time.perf_counter()
                s.query("INCLUDE PERFETTO MODULE graph_ann.critical_path")
                t_inc = time.perf_counter() - t1
                rows = s.query("SELECT COUNT(*) AS n, MIN(edges_source) AS src FROM graph_ann_critical_path").tuples()
            print(f"sql portable ({args.sql_replays} replays, {label}): load {t_load:.1f} s, "
                  f"graph_ann.critical_path {t_inc:.1f} s, rows {rows}")
        if os.environ.get("PGA_BENCH_FLOWS_UI"):
            for p in (plain, marked, flowed):
                t0 = time.perf_counter()
                with open_trace(p, engine="portable") as s:
                    flows = s.query("SELECT COUNT(*) AS n FROM flow").tuples()
                print(f"load {p.name}: {time.perf_counter() - t0:.1f} s, flows {flows}")


if __name__ == "__main__":
    sys.exit(main())
