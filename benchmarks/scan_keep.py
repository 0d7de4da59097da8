"""Benchmark (issue 33): the first pass's per-event work in C (``read/_scan.c``) against Python's.

    python benchmarks/scan_keep.py [--size 100M] [--rounds 8] [--dir /tmp/bench33k] [--keep]

On ``benchmarks/decoder_synth.py``'s decoder trace of ``--size`` (as ``convert_join_scale.py``
writes it: Kineto's times, replays added until the size is reached), one process runs the first pass (``scan_trace``) with the
compiled loop and with the Python loop, alternating, with and without the join's args kept.
Times are CPU seconds (``process_time``): of ``_Scan.keep`` alone (the loop and what it does
before it: the run's offsets, ``event_spans`` in C on the compiled side, metadata decoded whole) and of the whole first pass. Medians and
bests over ``--rounds``; the kept events are compared (every field, the same args objects shared).
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import msgspec  # noqa: E402

from benchmarks.convert_join_scale import _PER_REPLAY  # noqa: E402
from benchmarks.decoder_synth import write_decoder_trace  # noqa: E402
from benchmarks.proc import size_arg  # noqa: E402
from perfetto_graph_ann.read import scan  # noqa: E402


def _kept(events):
    first = {}
    return [(msgspec.structs.astuple(e), first.setdefault(id(e.args), k)) for k, e in enumerate(events)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="100M")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--dir", default="/tmp/bench33k")
    ap.add_argument("--keep", action="store_true", help="keep the trace")
    args = ap.parse_args()
    compiled, spans = scan.KEEP_LOOP, scan.EVENT_SPANS
    if compiled is None:
        sys.exit("the reader's compiled loop (_scan) is not built or is turned off")
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    trace = out / f"decoder_{args.size}.json"
    write_decoder_trace(str(trace), max(1, size_arg(args.size) // _PER_REPLAY), launches=[], kineto_times=True)
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, load {os.getloadavg()[0]:.2f}; "
          f"{trace.stat().st_size / 1e6:.0f} MB")
    keep_s = [0.0]
    real_keep = scan._Scan.keep

    def timed_keep(self, run, text, at):
        t = time.process_time()
        try:
            return real_keep(self, run, text, at)
        finally:
            keep_s[0] += time.process_time() - t

    scan._Scan.keep = timed_keep
    rows = []
    for join in (True, False):
        times = {("C", "keep"): [], ("C", "pass"): [], ("Python", "keep"): [], ("Python", "pass"): []}
        same = True
        for _ in range(args.rounds):
            kept = {}
            for arm, loop, span in (("C", compiled, spans), ("Python", None, None)):
                scan.KEEP_LOOP, scan.EVENT_SPANS = loop, span
                keep_s[0] = 0.0
                t = time.process_time()
                scanned = scan.scan_trace(str(trace), join=join)
                times[arm, "pass"].append(time.process_time() - t)
                times[arm, "keep"].append(keep_s[0])
                scanned.source.close()
                kept[arm] = _kept(scanned.events)
                del scanned
            same = same and kept["C"] == kept["Python"]
            del kept
        med = {k: statistics.median(v) for k, v in times.items()}
        rows.append((join, med, {k: min(v) for k, v in times.items()}, same))
    print(f"load after {os.getloadavg()[0]:.2f}")
    print("| join's args kept | loop | `keep` median s | `keep` best s | first pass median s | first pass best s | same events |")
    print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
    for join, med, best, same in rows:
        for arm in ("C", "Python"):
            print(f"| {'yes' if join else 'no'} | {arm} | {med[arm, 'keep']:.3f} | {best[arm, 'keep']:.3f} | "
                  f"{med[arm, 'pass']:.3f} | {best[arm, 'pass']:.3f} | {'yes' if same else 'NO'} |")
        print(f"| {'yes' if join else 'no'} | C / Python | {med['C', 'keep'] / med['Python', 'keep']:.2f}x | | "
              f"{med['C', 'pass'] / med['Python', 'pass']:.2f}x | | |")
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
