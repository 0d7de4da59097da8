"""Benchmark (issue 33): session 25's compiled loops in a convert, on against off, in one process.

    python benchmarks/convert_loops_ab.py [--size 100M] [--rounds 6] [--dir /tmp/bench33l] [--keep]

On ``benchmarks/decoder_synth.py``'s decoder trace of ``--size`` (Kineto's times, with its replay
record, as ``convert_join_scale.py`` writes it), one process converts it (two passes, the CLI's
``convert_file``) with the join and without, alternating two arms each round:

* ``on``: every compiled loop there is, the ones below included;
* ``off``: the loops compiled in session 25 turned off, the Python loops running instead:
  the writer's plan loop (``plan.PLACE_LOOP``), a run's times, extras and class
  (``events.FINISH_RUN``), the search for the events decoded whole (``scan.WHOLE_EVENTS``) and
  the second pass's batch text (``scan.GATHER``), and the join's loops over a replay's events
  (``join.ROW_LOOPS``).

CPU seconds (``process_time``) of the convert, and of its first pass (``scan_trace``) and its
plan (``plan_events``) alone; ``json.loads`` of the file's bytes (read included) is timed in the
same rounds for the ratio the issue sets (at most 1.0x). Medians and bests over ``--rounds``; the
outputs of the two arms are compared byte for byte.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.convert_join_scale import decoder_files  # noqa: E402
from perfetto_graph_ann.pipeline.convert import convert_file  # noqa: E402
from perfetto_graph_ann.read import events, scan  # noqa: E402
from perfetto_graph_ann.write.perfetto import plan, writer  # noqa: E402

join_mod = importlib.import_module("perfetto_graph_ann.join.join")  # the package exports the function by that name

#: (module, name) of each loop session 25 compiled
_SWITCHES = ((plan, "PLACE_LOOP"), (events, "FINISH_RUN"), (scan, "WHOLE_EVENTS"), (scan, "GATHER"),
             (join_mod, "ROW_LOOPS"))


def _timed(module, name: str, into: dict, key: str) -> None:
    real = getattr(module, name)

    def timed(*a, **k):
        t = time.process_time()
        try:
            return real(*a, **k)
        finally:
            into[key] += time.process_time() - t
    setattr(module, name, timed)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="100M")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--dir", default="/tmp/bench33l")
    ap.add_argument("--keep", action="store_true", help="keep the trace and outputs")
    args = ap.parse_args()
    compiled = {(m, n): getattr(m, n) for m, n in _SWITCHES}
    if any(v is None for v in compiled.values()):
        sys.exit("the compiled loops (_plan, _scan) are not built or are turned off")
    out = Path(args.dir)
    trace, ann = decoder_files(out, args.size)
    parts = {"scan": 0.0, "plan": 0.0}
    _timed(scan, "scan_trace", parts, "scan")  # read_for_writing imports it at each call
    _timed(writer, "plan_events", parts, "plan")
    rows = []
    for join in (True, False):
        times: dict = {}
        same = True
        for _ in range(args.rounds):
            t = time.process_time()
            with open(trace, "rb") as f:
                json.loads(f.read())
            times.setdefault(("json.loads", "convert"), []).append(time.process_time() - t)
            got = {}
            for arm in ("on", "off"):
                for (m, n), fn in compiled.items():
                    setattr(m, n, fn if arm == "on" else None)
                parts["scan"] = parts["plan"] = 0.0
                dst = out / f"{arm}.pftrace"
                t = time.process_time()
                convert_file(str(trace), str(dst), [str(ann)] if join else [])
                times.setdefault((arm, "convert"), []).append(time.process_time() - t)
                times.setdefault((arm, "scan"), []).append(parts["scan"])
                times.setdefault((arm, "plan"), []).append(parts["plan"])
                got[arm] = dst.read_bytes()
            same = same and got["on"] == got["off"]
            del got
        rows.append((join, {k: statistics.median(v) for k, v in times.items()},
                     {k: min(v) for k, v in times.items()}, same))
    for (m, n), fn in compiled.items():
        setattr(m, n, fn)
    print(f"load after {os.getloadavg()[0]:.2f}")
    print("| join | arm | convert median s | convert best s | / `json.loads` (medians) | first pass median s | "
          "plan median s | same bytes |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for join, med, best, same in rows:
        j = med["json.loads", "convert"]
        print(f"| {'yes' if join else 'no'} | `json.loads` | {j:.3f} | {best['json.loads', 'convert']:.3f} | 1.00x | | | |")
        for arm in ("on", "off"):
            print(f"| {'yes' if join else 'no'} | {arm} | {med[arm, 'convert']:.3f} | {best[arm, 'convert']:.3f} | "
                  f"{med[arm, 'convert'] / j:.2f}x | {med[arm, 'scan']:.3f} | {med[arm, 'plan']:.3f} | "
                  f"{'yes' if same else 'NO'} |")
        print(f"| {'yes' if join else 'no'} | on / off | {med['on', 'convert'] / med['off', 'convert']:.2f}x | | | "
              f"{med['on', 'scan'] / med['off', 'scan']:.2f}x | {med['on', 'plan'] / med['off', 'plan']:.2f}x | |")
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
