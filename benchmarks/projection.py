"""Projection benchmark: what the graph replay and scope slices add to an annotated conversion.

Builds the 200k-event graph-replay trace (the annotated seed-block recording repeated with
fresh correlations: benchmarks/synth.py), joins it with the seed block's capture record
(4 scopes, so 5 slices per replay: 1 replay + 4 scopes), then times, interleaved, in one
run: ``read_trace``, the join without the projection (``join.join.project`` replaced),
the projection alone, and the write of the same trace with the layout without and with
the ranges. Reports the best of ``--repeat`` runs of each, the time the projection adds
(projection + write difference) against the whole annotated conversion (read + join +
write) and against the write alone, and the output sizes. Prints a Markdown table.

    python benchmarks/projection.py --events 200000 --repeat 5
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import gzip
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import msgspec  # noqa: E402
from synth import make_trace  # noqa: E402

import importlib  # noqa: E402

join_module = importlib.import_module("perfetto_graph_ann.join.join")  # the package exports the function as .join
from perfetto_graph_ann._resources import demo_data_dir  # noqa: E402
from perfetto_graph_ann.annotations.capture_record import read_capture_record  # noqa: E402
from perfetto_graph_ann.read.kineto import read_trace  # noqa: E402
from perfetto_graph_ann.pipeline.convert import convert  # noqa: E402


def timed(fn):
    t = time.perf_counter()
    r = fn()
    return time.perf_counter() - t, r


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=200000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    ann = read_capture_record(demo_data_dir() / "seed_block_annotated.capture.json")
    project = join_module.project
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    best = {k: float("inf") for k in ("read", "join_off", "project", "write_off", "write_on")}
    sizes = {}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "t.json.gz"
        with gzip.open(src, "wb", compresslevel=1) as f:
            f.write(msgspec.json.Encoder(decimal_format="number").encode(
                make_trace(args.events, fixtures=("seed_block_annotated",))))
        captured = {}

        def spy(*a):
            captured["args"] = a
            return []

        for _ in range(args.repeat):  # A/B interleaved: load on a shared machine drifts
            t, trace = timed(lambda: read_trace(src))
            best["read"] = min(best["read"], t)
            join_module.project = spy
            try:
                t, off = timed(lambda: join_module.join(trace, ann, "all"))
            finally:
                join_module.project = project
            best["join_off"] = min(best["join_off"], t)
            t, ranges = timed(lambda: project(*captured["args"]))
            best["project"] = min(best["project"], t)
            on = dataclasses.replace(off, ranges=ranges)
            for key, layout in (("off", off), ("on", on)):
                out = Path(tmp) / f"{key}.pftrace"
                t, _ = timed(lambda: convert(trace, out, layout=layout))
                best[f"write_{key}"] = min(best[f"write_{key}"], t)
                sizes[key] = out.stat().st_size
    added = best["project"] + best["write_on"] - best["write_off"]
    total = best["read"] + best["join_off"] + best["write_off"]
    print("| events | kernels | projected slices | read s | join s | project s | write s (off / on) | "
          "added s | added / (read + join + write) | added / write | output bytes (off / on) | size ratio |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print(f"| {len(trace.events)} | {off.report.total} | {len(ranges)} | {best['read']:.3f} | {best['join_off']:.3f} | "
          f"{best['project']:.3f} | {best['write_off']:.3f} / {best['write_on']:.3f} | {added:.3f} | "
          f"{added / total:.3f} | {added / best['write_off']:.3f} | {sizes['off']:,} / {sizes['on']:,} | "
          f"{sizes['on'] / sizes['off']:.3f} |")


if __name__ == "__main__":
    main()
