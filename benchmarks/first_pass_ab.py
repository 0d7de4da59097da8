"""Benchmark (issue 33): the two-pass read's first pass with a run's usual events read from their
text (``read.scan.FAST_RUN``, session 28) on against off, in one process.

    python benchmarks/first_pass_ab.py [TRACE.json[.gz]] [--size 100M] [--rounds 5] [--dir /tmp/bench33f]

On ``TRACE`` (a gzip file is decompressed first, untimed: the first pass reads plain JSON) or else
``benchmarks/decoder_synth.py``'s decoder trace of ``--size``, one process runs the first pass with
the join's args (``scan.scan_trace(path, join=True)``, as ``convert --annotations`` and
``pga.export`` run it) alternating the arms each round: ``on`` (``fast_run``, the run decoded
only where it does not read it) and ``off`` (every run decoded by msgspec, then kept by the
compiled loop). Wall seconds, medians and bests over ``--rounds``; how many runs ``fast_run``
answered; the arms' light events compared field by field and their offsets.
"""
from __future__ import annotations

import argparse
import gzip
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.convert_join_scale import decoder_files  # noqa: E402
from perfetto_graph_ann.read import scan  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", nargs="?")
    ap.add_argument("--size", default="100M")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", default="/tmp/bench33f")
    args = ap.parse_args()
    real = scan.FAST_RUN
    if real is None:
        sys.exit("the reader's compiled loop (_scan) is not built or is turned off")
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    if args.trace is None:
        trace = decoder_files(out, args.size)[0]
    elif args.trace.endswith(".gz"):
        trace = out / "trace.json"
        with gzip.open(args.trace, "rb") as f:
            trace.write_bytes(f.read())
    else:
        trace = Path(args.trace)
    answered = []

    def counted(*a):
        got = real(*a)
        answered.append(got is not None)
        return got

    times: dict = {"on": [], "off": []}
    kept: dict = {}
    for r in range(args.rounds):
        for arm in (("on", "off") if r % 2 == 0 else ("off", "on")):
            answered.clear()
            scan.FAST_RUN = counted if arm == "on" else None
            t = time.perf_counter()
            scanned = scan.scan_trace(str(trace), join=True)
            times[arm].append(time.perf_counter() - t)
            if r == 0:
                kept[arm] = (list(scanned.events), scanned.source.offsets.tolist(), list(answered))
            del scanned
    scan.FAST_RUN = real
    same = kept["on"][:2] == kept["off"][:2]
    runs = kept["on"][2]
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{trace}: {len(kept['on'][0]):,} events; fast_run read {sum(runs)} of {len(runs)} runs")
    print("| arm | median s | best s | same events and offsets |")
    print("| --- | ---: | ---: | --- |")
    for k, v in times.items():
        print(f"| {k} | {med[k]:.3f} | {min(v):.3f} | {'yes' if same else 'NO'} |")
    print(f"| on / off | {med['on'] / med['off']:.2f}x | | |")
    if args.trace is None or args.trace.endswith(".gz"):
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
