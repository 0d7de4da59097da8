"""Join benchmark: cost of the join, annotated Chrome JSON and annotated convert on large graphed traces.

Builds traces of N events by repeating the annotated seed-block recording (5 replays of
14 kernels each, fresh correlations per repeat: benchmarks/synth.py), then times in one run:
``read_trace``, ``join`` (calibrated, and structural with the calibration stripped),
``write_chrome_json`` with the layout, and ``convert`` without / with the layout.
Prints a Markdown table for BENCHMARKS.md.

    python benchmarks/join.py --events 20000 200000
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

from perfetto_graph_ann._resources import demo_data_dir  # noqa: E402
from perfetto_graph_ann.annotations.capture_record import read_capture_record  # noqa: E402
from perfetto_graph_ann.join import join  # noqa: E402
from perfetto_graph_ann.read.kineto import read_trace  # noqa: E402
from perfetto_graph_ann.write.chrome_json import write_chrome_json  # noqa: E402
from perfetto_graph_ann.pipeline.convert import convert  # noqa: E402


def best(fn, repeat: int):
    times, result = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return min(times), result


def strip(ann):
    graphs = tuple(dataclasses.replace(g, nodes=tuple(dataclasses.replace(n, stream=None, ordinal=None) for n in g.nodes))
                   for g in ann.graphs)
    return dataclasses.replace(ann, graphs=graphs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, nargs="+", default=[20000, 200000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    ann = read_capture_record(demo_data_dir() / "seed_block_annotated.capture.json")
    ann_struct = strip(ann)
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print("| events | kernels | read s | join calibrated s | join structural s | join cal./read | "
          "Chrome JSON (.json.gz) s | convert s | convert+layout s | layout overhead |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.events:
            src = Path(tmp) / f"t{n}.json.gz"
            doc = make_trace(n, fixtures=("seed_block_annotated",))
            with gzip.open(src, "wb", compresslevel=1) as f:
                f.write(msgspec.json.Encoder(decimal_format="number").encode(doc))
            t_read, trace = best(lambda: read_trace(src), args.repeat)
            t_join, layout = best(lambda: join(trace, ann, "all"), args.repeat)
            t_struct, layout_s = best(lambda: join(trace, ann_struct, "all"), args.repeat)
            assert layout.report.unmatched == 0 and layout_s.report.unmatched == 0
            t_json, _ = best(lambda: write_chrome_json(trace, Path(tmp) / "a.json.gz", layout), args.repeat)
            t_conv, _ = best(lambda: convert(trace, Path(tmp) / "p.pftrace"), args.repeat)
            t_conv_l, _ = best(lambda: convert(trace, Path(tmp) / "q.pftrace", layout=layout), args.repeat)
            k = layout.report.total
            print(f"| {len(trace.events)} | {k} | {t_read:.3f} | {t_join:.3f} | {t_struct:.3f} | {t_join / t_read:.2f} | "
                  f"{t_json:.3f} | {t_conv:.3f} | {t_conv_l:.3f} | {t_conv_l / t_conv:.2f} |")


if __name__ == "__main__":
    main()
