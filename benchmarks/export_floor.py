"""Benchmark (issue 33): how far below today's export a pipeline of Python objects can go.

    python benchmarks/export_floor.py [--replays 100] [--rounds 5]

On ``benchmarks/decoder_synth.py``'s trace (the 828-kernel decoder graph replayed
``--replays`` times, the shape ``benchmarks/gpu/export_pace.py`` profiles on the H200), CPU time
(``process_time``, GC paused as export runs) of:

* ``json.loads`` of the text;
* ``msgspec`` decoding it to plain dicts and lists (the fastest way known here to make the
  events Python objects) and only validating it (``msgspec.Raw``: the text scanned, no object
  made): what a reader that builds no object per event would start from;
* ``pga.export``'s three phases after torch's JSON: ``parse`` (``parse_trace_bytes``), ``join``
  (``graph_lanes="all"``, with the GPU projection) and ``write`` (``write_perfetto`` to memory).

Prints medians and bests per arm, and each over ``json.loads``.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import io
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import msgspec  # noqa: E402

from benchmarks.decoder_synth import decoder_annotations, decoder_trace  # noqa: E402
from perfetto_graph_ann.join import join  # noqa: E402
from perfetto_graph_ann.read.kineto import parse_trace_bytes  # noqa: E402
from perfetto_graph_ann.write.perfetto import WriterConfig, write_perfetto  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replays", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    raw = decoder_trace(args.replays)
    ann = decoder_annotations(36)
    generic = msgspec.json.Decoder()
    print(f"{platform.node()} {platform.machine()} Python {platform.python_version()} "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; {len(raw) / 1e6:.1f} MB, "
          f"{args.replays} replays; load {os.getloadavg()[0]:.2f}")
    times: dict = {}

    def timed(name, fn):
        c = time.process_time()
        out = fn()
        times.setdefault(name, []).append(time.process_time() - c)
        return out

    gc.disable()
    for _ in range(args.rounds):
        timed("json.loads", lambda: json.loads(raw))
        timed("msgspec: dicts and lists", lambda: generic.decode(raw))
        timed("msgspec: validate only, no object", lambda: msgspec.json.decode(raw, type=msgspec.Raw))
        trace = timed("export: parse", lambda: parse_trace_bytes(raw, "trace"))
        layout = timed("export: join", lambda: join(trace, ann, graph_lanes="all"))
        timed("export: write", lambda: write_perfetto(trace, io.BytesIO(), layout, WriterConfig(progress=False)))
        del trace, layout
        gc.collect()
    gc.enable()
    base = statistics.median(times["json.loads"])
    print(f"load after {os.getloadavg()[0]:.2f}")
    print("| arm | median s | best s | median / json.loads |")
    print("| --- | ---: | ---: | ---: |")
    for name, v in times.items():
        print(f"| {name} | {statistics.median(v):.3f} | {min(v):.3f} | {statistics.median(v) / base:.2f}x |")


if __name__ == "__main__":
    main()
