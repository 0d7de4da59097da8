"""Benchmark (issue 33): what the two-pass read's second pass reads from the file, by the span
within which a batch's events are read in one piece (``read.scan._SPAN``).

    python benchmarks/second_pass_reads.py TRACE.json[.gz] ANNOTATIONS.json [--spans 8388608 1048576] [--rounds 5]

``pga.export`` (``graph_lanes="all"``, two passes whatever the size) of the trace with its
annotations, as it runs on the file torch wrote (a ``.gz`` trace is written out plain first,
untimed). For each span, alternating each round: wall seconds (median), the bytes and calls of
the second pass's reads (``EventSource._read``, counted in an untimed run) against the file's
size, and the output's digest (every span must write the same bytes).
"""
from __future__ import annotations

import argparse
import datetime
import gzip
import hashlib
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

from perfetto_graph_ann.annotations.files import load_annotations  # noqa: E402
from perfetto_graph_ann.capture.export import export  # noqa: E402
from perfetto_graph_ann.pipeline import convert  # noqa: E402
from perfetto_graph_ann.read import scan  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("annotations")
    ap.add_argument("--spans", type=int, nargs="+", default=[1 << 23, 1 << 20])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    ann = load_annotations(args.annotations)
    span0, min0, read0 = scan._SPAN, convert.TWO_PASS_MIN_BYTES, scan.EventSource._read
    with tempfile.TemporaryDirectory(prefix="pga-reads-") as tmp:
        src = os.path.join(tmp, "trace.json")
        with (gzip.open if args.trace.endswith(".gz") else open)(args.trace, "rb") as f, open(src, "wb") as o:
            shutil.copyfileobj(f, o)
        size = os.path.getsize(src)
        print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
              f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, load {os.getloadavg()[0]:.2f}; "
              f"{size / 1e6:.0f} MB of JSON")
        out = os.path.join(tmp, "out.pftrace")
        convert.TWO_PASS_MIN_BYTES = 0
        reads, digests, times = {}, {}, {s: [] for s in args.spans}
        try:
            for span in args.spans:
                scan._SPAN = span
                counted = [0, 0]

                def read(self, lo, hi, counted=counted):
                    counted[0] += hi - lo
                    counted[1] += 1
                    return read0(self, lo, hi)
                scan.EventSource._read = read
                export(src, out, ann, graph_lanes="all")
                scan.EventSource._read = read0
                reads[span] = counted
                digests[span] = hashlib.sha256(Path(out).read_bytes()).hexdigest()[:16]
            for _ in range(args.rounds):
                for span in args.spans:
                    scan._SPAN = span
                    t = time.perf_counter()
                    export(src, out, ann, graph_lanes="all")
                    times[span].append(time.perf_counter() - t)
        finally:
            scan._SPAN, convert.TWO_PASS_MIN_BYTES, scan.EventSource._read = span0, min0, read0
    base = statistics.median(times[args.spans[0]])
    print(f"load after {os.getloadavg()[0]:.2f}")
    print("| span | bytes read | / file | reads | export s (median) | / first span | digest |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for span in args.spans:
        med = statistics.median(times[span])
        print(f"| {span:,} | {reads[span][0]:,} | {reads[span][0] / size:.2f}x | {reads[span][1]} | {med:.3f} | "
              f"{med / base:.2f}x | {digests[span]} |")


if __name__ == "__main__":
    main()
