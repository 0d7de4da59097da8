"""Benchmark: ``pga.export(prof, ...)`` on the CPU, with a stand-in profiler (issue 33).

    python benchmarks/export.py [--kernels 28800 5760] [--repeat 3] [--profile]

torch's ``export_chrome_trace`` needs a GPU profile; here a stand-in profiler's
``export_chrome_trace(path)`` writes a recorded torch.profiler trace (the annotated
seed-block recording repeated by ``benchmarks/synth.py``: 14 graphed kernels a replay, their
``cudaGraphLaunch`` and ``ac2g`` flows) so that everything ``pga.export`` does after torch
has written its JSON runs as it does on the GPU machine: read the file back, parse it, join it
to the capture record, write the ``.pftrace``. Each run is a fresh profile (torch saves a
profile once). Printed per size: the stand-in's own write (a file write from memory: what
torch's exporter costs is not reproducible here), ``export`` in all and its phases (read + parse, join, write),
``export(keep_json=...)``, and with ``--profile`` the functions that take the most time
(cProfile). The GPU comparison with torch's own exporter is ``benchmarks/gpu/export_pace.py``.
"""
from __future__ import annotations

import argparse
import cProfile
import datetime
import os
import platform
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.synth import dumps, make_trace  # noqa: E402
from perfetto_graph_ann._resources import demo_data_dir  # noqa: E402
from perfetto_graph_ann.annotations.capture_record import read_capture_record  # noqa: E402
from perfetto_graph_ann.capture.export import export  # noqa: E402

#: Kernels of one replay of the recording the trace repeats.
KERNELS_PER_REPLAY = 14


class RecordedProfiler:
    """A stand-in for ``torch.profiler.profile``: ``export_chrome_trace(path)`` writes the
    recorded trace's bytes, once (torch saves a profile once)."""

    def __init__(self, data: bytes, step_num: int = 1):
        self.data, self.step_num, self.saved, self.write_s = data, step_num, False, 0.0

    def export_chrome_trace(self, path: str) -> None:
        if self.saved:
            raise RuntimeError("Trace is already saved.")
        t = time.perf_counter()
        with open(path, "wb") as f:
            f.write(self.data)
        self.write_s = time.perf_counter() - t
        self.saved = True


def trace_bytes(kernels: int) -> bytes:
    """A recorded trace with about ``kernels`` graphed kernels."""
    per_kernel = 91_354 / 38_500  # events per graphed kernel of the repeated recording (measured)
    return dumps(make_trace(int(kernels * per_kernel), fixtures=("seed_block_annotated",)))


def phases(data: bytes, ann, tmp: str, graph_lanes: str = "none") -> dict:
    """export's phases, timed one by one as export runs them: the collector paused, the join's
    placements in columns for a .pftrace (``write_joined``)."""
    from perfetto_graph_ann.pipeline.convert import _write
    from perfetto_graph_ann.pipeline.joined import read_and_join
    from perfetto_graph_ann.read.kineto import parse_trace_bytes
    from perfetto_graph_ann.write.pftrace import ConvertConfig, paused_gc

    out = {}
    with paused_gc():
        t = time.perf_counter()
        trace = parse_trace_bytes(data, "torch.profiler trace")
        out["parse"] = time.perf_counter() - t
        t = time.perf_counter()
        layout = read_and_join(trace, ann, graph_lanes=graph_lanes, compact=True).layout
        out["join"] = time.perf_counter() - t
        t = time.perf_counter()
        _write(trace, os.path.join(tmp, "phases.pftrace"), layout, ConvertConfig())
        out["write"] = time.perf_counter() - t
        out["events"] = len(trace.events)
        out["kernels"] = layout.report.total
        del trace, layout
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", type=int, nargs="+", default=[28_800, 5_760])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="also the top functions of one export (cProfile)")
    args = ap.parse_args()
    ann = read_capture_record(demo_data_dir() / "seed_block_annotated.capture.json")
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, load {os.getloadavg()[0]:.1f}")
    print("| kernels | events | JSON MB | stand-in write s | export s | parse s | join s | write s | "
          "export(keep_json) s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory(prefix="pga-export-bench-") as tmp:
        for n in args.kernels:
            data = trace_bytes(n)
            best = {"export": float("inf"), "keep": float("inf"), "write": float("inf")}
            ph = {}
            for _ in range(args.repeat):
                prof = RecordedProfiler(data)
                t = time.perf_counter()
                export(prof, os.path.join(tmp, "out.pftrace"), ann)
                best["export"] = min(best["export"], time.perf_counter() - t)
                best["write"] = min(best["write"], prof.write_s)
                prof = RecordedProfiler(data)
                t = time.perf_counter()
                export(prof, os.path.join(tmp, "kept.pftrace"), ann, keep_json=os.path.join(tmp, "kept.json"))
                best["keep"] = min(best["keep"], time.perf_counter() - t)
                p = phases(data, ann, tmp)
                ph = {k: min(ph.get(k, float("inf")), v) for k, v in p.items()}
            print(f"| {ph['kernels']:,} | {ph['events']:,} | {len(data) / 1e6:.1f} | {best['write']:.3f} | "
                  f"{best['export']:.3f} | {ph['parse']:.3f} | "
                  f"{ph['join']:.3f} | {ph['write']:.3f} | {best['keep']:.3f} |")
            if args.profile:
                prof = RecordedProfiler(data)
                cp = cProfile.Profile()
                cp.enable()
                export(prof, os.path.join(tmp, "out.pftrace"), ann)
                cp.disable()
                pstats.Stats(cp).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
