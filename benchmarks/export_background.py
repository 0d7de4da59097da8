"""What the caller waits for: blocking against background export (issue 33), on the CPU.

    python benchmarks/export_background.py [--replays 100] [--layers 36] [--rounds 3]

A stand-in profiler whose ``export_chrome_trace(path)`` writes a recorded trace (the graphed
decoder of ``benchmarks/decoder_synth.py``: 100 replays of 828 kernels, as the H200 profile of
``benchmarks/gpu/export_pace.py``) from memory; each arm gets a fresh one (torch saves a
profile once). Arms, alternating in order round by round, wall seconds:

* ``stand-in``: its ``export_chrome_trace`` alone (a file write: torch's exporter itself is
  not reproducible here; on the H200 it took 0.71 s for this shape);
* ``export``: ``pga.export(prof, out, graph_lanes="all")``, blocking;
* ``export bg``: ``pga.export(..., background=True)``: the caller's wait, then until
  ``result()`` returns (the file is whole);
* ``handler``: ``trace_handler(..., background=False)(prof)``;
* ``handler bg``: ``trace_handler(...)(prof)`` (background, the default): the caller's wait,
  then until ``handler.wait()`` returns.

For the background arms also the caller's wait less that arm's own stand-in write: what this
package adds to torch's export on the caller's path (reading the JSON back for the profile's
cache, the annotations saved, the process started).

Each background conversion is waited for before the next arm starts (the machine has few
cores). Prints load averages and a Markdown table of medians with the ratio of each caller's
wait to the stand-in's write.
"""
from __future__ import annotations

import argparse
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

from benchmarks.decoder_synth import decoder_annotations, decoder_trace  # noqa: E402
from benchmarks.export import RecordedProfiler  # noqa: E402
import perfetto_graph_ann as pga  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replays", type=int, default=100)
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    data = decoder_trace(args.replays, args.layers)
    ann = decoder_annotations(args.layers)
    load0 = os.getloadavg()
    print(f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, load {load0[0]:.2f} {load0[1]:.2f}; "
          f"{args.replays} replays x {args.layers * 23} kernels, JSON {len(data) / 1e6:.1f} MB", flush=True)
    rows = {k: [] for k in ("stand-in", "export", "export bg wait", "export bg wait - its stand-in write",
                            "export bg done", "handler", "handler bg wait", "handler bg wait - its stand-in write",
                            "handler bg done")}
    tmp = tempfile.mkdtemp(prefix="pga-export-bg-")
    try:
        arms = ["stand-in", "export", "export bg", "handler", "handler bg"]
        for rnd in range(args.rounds):
            order = arms if rnd % 2 == 0 else arms[::-1]
            for arm in order:
                folder = os.path.join(tmp, f"{rnd}-{arm.replace(' ', '_')}")
                os.makedirs(folder)
                prof = RecordedProfiler(data)
                t = time.perf_counter()
                if arm == "stand-in":
                    prof.export_chrome_trace(os.path.join(folder, "t.json"))
                    rows[arm].append(time.perf_counter() - t)
                elif arm == "export":
                    pga.export(prof, os.path.join(folder, "o.pftrace"), ann, graph_lanes="all")
                    rows[arm].append(time.perf_counter() - t)
                elif arm == "export bg":
                    h = pga.export(prof, os.path.join(folder, "o.pftrace"), ann, graph_lanes="all", background=True)
                    rows["export bg wait"].append(time.perf_counter() - t)
                    rows["export bg wait - its stand-in write"].append(rows["export bg wait"][-1] - prof.write_s)
                    h.result()
                    rows["export bg done"].append(time.perf_counter() - t)
                elif arm == "handler":
                    pga.trace_handler(folder, worker_name="w", annotations=ann, background=False)(prof)
                    rows[arm].append(time.perf_counter() - t)
                else:
                    handler = pga.trace_handler(folder, worker_name="w", annotations=ann)
                    handler(prof)
                    rows["handler bg wait"].append(time.perf_counter() - t)
                    rows["handler bg wait - its stand-in write"].append(rows["handler bg wait"][-1] - prof.write_s)
                    assert len(handler.wait()) == 1
                    rows["handler bg done"].append(time.perf_counter() - t)
                shutil.rmtree(folder)
            print(f"round {rnd}: " + ", ".join(f"{k} {v[-1]:.3f}" for k, v in rows.items() if v), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load1 = os.getloadavg()
    base = statistics.median(rows["stand-in"])
    print(f"load after {load1[0]:.2f} {load1[1]:.2f}")
    print("| arm | median s | / stand-in |")
    print("| --- | ---: | ---: |")
    for k, v in rows.items():
        m = statistics.median(v)
        print(f"| {k} | {m:.3f} | {m / base:.2f}x |")


if __name__ == "__main__":
    main()
