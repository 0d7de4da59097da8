"""A/B of ``pga.export``'s phases after torch's JSON (issue 33) on the H200 measurement's shape:
this checkout against a git revision, imported under another name, alternating round by round.

    python benchmarks/export_ab.py [--base main] [--replays 100] [--layers 36] [--rounds 6] [--no-record]

The trace is ``benchmarks/decoder_synth.py``'s: a calibrated 828-node decoder graph with
layer / attn / mlp scopes, replayed ``--replays`` times (100: 82,800 kernels, as
``benchmarks/gpu/export_pace.py`` profiles on the H200), joined with its annotations and, as
``recorded_annotations()`` on the GPU machine has, a replay record of the launches
(``--no-record``: without). Per round and side, CPU time
(``process_time``) of ``parse`` (``parse_trace_bytes``), ``join`` (``graph_lanes="all"``, with
the GPU projection) and ``write`` (``write_perfetto`` of that side's own trace and layout, to
memory), GC paused as export runs them. Checks that both sides write the same bytes and
report the same join. Prints load average before and after, best and median per phase, and
the ratios of the medians.
"""
from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import io
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.convert_ab import BASE_NAME, load_base  # noqa: E402
from benchmarks.decoder_synth import decoder_annotations, decoder_trace  # noqa: E402


class Side:
    def __init__(self, pkg: str):
        self.kineto = importlib.import_module(f"{pkg}.read.kineto")
        self.join = importlib.import_module(f"{pkg}.join").join
        self.perfetto = importlib.import_module(f"{pkg}.write.perfetto")
        self.model = importlib.import_module(f"{pkg}.annotations.model")

    def annotations(self, layers: int, record):
        """decoder_synth's annotations (with the replay record when ``record``) rebuilt with
        this side's model classes."""
        src = decoder_annotations(layers, record)
        m = self.model
        g = src.graphs[0]
        nodes = tuple(m.NodeRecord(**{f: getattr(n, f) for f in n.__dataclass_fields__}) for n in g.nodes)
        scopes = tuple(m.ScopeInstance(s.id, s.fields, s.parent) for s in g.scopes)
        windows = None if src.replays is None else tuple(
            m.ReplayWindow(w.pid, w.start_ns, w.stop_ns, tuple(m.ReplayThread(t.ident, t.native_id, t.graphs,
                                                                               starts_ns=t.starts_ns)
                                                               for t in w.threads)) for w in src.replays)
        return m.AnnotationSet(graphs=(m.GraphRecord(g.exec_id, nodes, scopes=scopes),), replays=windows)

    def phases(self, raw: bytes, ann) -> tuple:
        t = {}
        c = time.process_time()
        trace = self.kineto.parse_trace_bytes(raw, "torch.profiler trace")
        t["parse"] = time.process_time() - c
        c = time.process_time()
        layout = self.join(trace, ann, graph_lanes="all")
        t["join"] = time.process_time() - c
        buf = io.BytesIO()
        c = time.process_time()
        self.perfetto.write_perfetto(trace, buf, layout, self.perfetto.WriterConfig(progress=False))
        t["write"] = time.process_time() - c
        return t, buf.getvalue(), layout.report


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="main")
    ap.add_argument("--replays", type=int, default=100)
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--no-record", action="store_true",
                    help="annotations without the replay record (recorded_annotations() on the GPU has one)")
    args = ap.parse_args()
    base_dir = tempfile.mkdtemp(prefix="pga-export-ab-")
    atexit.register(shutil.rmtree, base_dir, True)
    load_base(args.base, Path(base_dir))
    launches: list = []
    raw = decoder_trace(args.replays, args.layers, launches=launches)
    sides = {"base": Side(BASE_NAME), "head": Side("perfetto_graph_ann")}
    anns = {k: s.annotations(args.layers, None if args.no_record else launches) for k, s in sides.items()}
    load0 = os.getloadavg()
    print(f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, load {load0[0]:.2f} {load0[1]:.2f}; "
          f"{args.replays} replays x {args.layers * 23} kernels, JSON {len(raw) / 1e6:.1f} MB; base = {args.base}; "
          f"replay record: {'no' if args.no_record else 'yes'}")
    times = {k: {"parse": [], "join": [], "write": []} for k in sides}
    out = {}
    gc.disable()
    for rnd in range(args.rounds):
        for name in (("base", "head") if rnd % 2 == 0 else ("head", "base")):
            t, data, report = sides[name].phases(raw, anns[name])
            for k, v in t.items():
                times[name][k].append(v)
            out[name] = (data, report)
            gc.enable()
            gc.collect()
            gc.disable()
    same_bytes = out["base"][0] == out["head"][0]
    same_report = out["base"][1].matched == out["head"][1].matched and out["base"][1].total == out["head"][1].total
    load1 = os.getloadavg()
    print(f"same output bytes: {same_bytes}; same join counts: {same_report}; load after {load1[0]:.2f} {load1[1]:.2f}")
    print("| phase | base best | base median | head best | head median | head / base (medians) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for k in ("parse", "join", "write"):
        b, h = times["base"][k], times["head"][k]
        print(f"| {k} | {min(b):.3f} | {statistics.median(b):.3f} | {min(h):.3f} | {statistics.median(h):.3f} | "
              f"{statistics.median(h) / statistics.median(b):.2f}x |")
    tb = [sum(x) for x in zip(*times["base"].values())]
    th = [sum(x) for x in zip(*times["head"].values())]
    print(f"| all three | {min(tb):.3f} | {statistics.median(tb):.3f} | {min(th):.3f} | {statistics.median(th):.3f} | "
          f"{statistics.median(th) / statistics.median(tb):.2f}x |")
    if not same_bytes:
        sys.exit("the two sides wrote different bytes")


if __name__ == "__main__":
    main()
