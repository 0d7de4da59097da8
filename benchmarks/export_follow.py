"""Benchmark (issue 33): ``pga.export`` reading torch's JSON while torch writes it, on the CPU.

    python benchmarks/export_follow.py [--replays 100 20] [--mb-s 80] [--rounds 5] [--layers 36]

torch's ``export_chrome_trace`` holds the calling process (the interpreter lock, in C++) while
Kineto writes ``<path>.tmp`` and renames it; ``PERFETTO_GRAPH_ANN_EXPORT_FOLLOW`` lets a worker
process read the file meanwhile (``read.follow``). The stand-in profiler here does what torch
does to the caller: it writes ``benchmarks/decoder_synth.py``'s trace (with its replay record,
as ``recorded_annotations()`` has it) to ``<path>.tmp`` at ``--mb-s`` MB/s, spinning (holding a
core and the lock) between its 256 kB writes, then renames it. On the H200 torch wrote the
75 MB profile at 65-100 MB/s (BENCHMARKS.md, session 28).

Arms, alternating round by round (each a fresh stand-in: torch saves a profile once), wall s:

* ``stand-in``: its ``export_chrome_trace`` alone: the ratios' denominator;
* ``in process``: ``pga.export(prof, out, graph_lanes="all")`` with the follow off (read once
  torch is done, in the caller: the code before);
* ``follow cold``: the same call with the follow on, the worker started as torch starts writing
  (``PERFETTO_GRAPH_ANN_EXPORT_SPARE=off``: no worker started ahead); the worker converts while
  the caller joins for the layout it returns;
* ``follow``: the same with a spare worker ready (the default: started ahead by the export
  before, its imports done);
* ``bg follow done``: ``export(..., background=True)`` until ``result()`` returns, a spare ready.

Each arm starts ``--settle`` seconds after the one before (untimed; a spare has done its imports
by then, as between the profiling cycles of a program).

Checks that every arm's file has the same bytes. Prints a Markdown table of medians per replay
count, each over the same round's stand-in write.
"""
from __future__ import annotations

import argparse
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

from benchmarks.decoder_synth import decoder_annotations, decoder_trace  # noqa: E402
import perfetto_graph_ann as pga  # noqa: E402
from perfetto_graph_ann.capture import background  # noqa: E402
from perfetto_graph_ann.capture.export import expected_kernels  # noqa: E402

_CHUNK = 256 << 10


class PacedProfiler:
    """A stand-in for torch.profiler.profile writing as Kineto does: ``<path>.tmp`` at a pace,
    the caller's core busy meanwhile, then renamed; once."""

    def __init__(self, data: bytes, mb_s: float) -> None:
        self.data, self.rate, self.calls, self.write_s = data, mb_s * 1e6, 0, 0.0

    def export_chrome_trace(self, path: str) -> None:
        self.calls += 1
        if self.calls > 1:
            raise RuntimeError("Trace is already saved.")
        t0 = time.perf_counter()
        with open(path + ".tmp", "wb") as f:
            for at in range(0, len(self.data), _CHUNK):
                f.write(self.data[at:at + _CHUNK])
                f.flush()
                due = t0 + (at + _CHUNK) / self.rate
                while time.perf_counter() < due:
                    pass
        os.rename(path + ".tmp", path)
        self.write_s = time.perf_counter() - t0


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replays", type=int, nargs="+", default=[100, 20])
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--mb-s", type=float, default=80.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--settle", type=float, default=1.0, help="seconds between arms (untimed)")
    args = ap.parse_args()
    load0 = os.getloadavg()
    print(f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, load {load0[0]:.2f} {load0[1]:.2f}; "
          f"stand-in writes at {args.mb_s:g} MB/s", flush=True)
    arms = ["stand-in", "in process", "follow cold", "follow", "bg follow done"]
    table = []
    tmp = tempfile.mkdtemp(prefix="pga-export-follow-")
    try:
        for replays in args.replays:
            launches: list = []
            data = decoder_trace(replays, args.layers, launches=launches)
            ann = decoder_annotations(args.layers, record=launches)
            print(f"{replays} replays x {args.layers * 23} kernels, JSON {len(data) / 1e6:.1f} MB, "
                  f"{expected_kernels(ann)} kernels by the replay record", flush=True)
            rows = {a: [] for a in arms}
            digests = set()
            for rnd in range(args.rounds):
                for arm in (arms if rnd % 2 == 0 else arms[::-1]):
                    folder = os.path.join(tmp, f"{replays}-{rnd}-{arm.replace(' ', '_')}")
                    os.makedirs(folder)
                    out = os.path.join(folder, "o.pftrace")
                    prof = PacedProfiler(data, args.mb_s)
                    os.environ["PERFETTO_GRAPH_ANN_EXPORT_FOLLOW"] = "off" if arm == "in process" else "0"
                    if arm == "follow cold":
                        os.environ["PERFETTO_GRAPH_ANN_EXPORT_SPARE"] = "off"
                        background._drop_spare()
                    else:
                        os.environ.pop("PERFETTO_GRAPH_ANN_EXPORT_SPARE", None)
                        background.prepare_spare()
                    time.sleep(args.settle)
                    t = time.perf_counter()
                    if arm == "stand-in":
                        prof.export_chrome_trace(os.path.join(folder, "t.json"))
                    elif arm == "bg follow done":
                        pga.export(prof, out, ann, graph_lanes="all", background=True).result()
                    else:
                        pga.export(prof, out, ann, graph_lanes="all")
                    rows[arm].append((time.perf_counter() - t, prof.write_s))
                    if arm != "stand-in":
                        digests.add(_digest(out))
                    shutil.rmtree(folder)
                print(f"  round {rnd}: " + ", ".join(f"{a} {v[-1][0]:.3f}" for a, v in rows.items()), flush=True)
            assert len(digests) == 1, "the arms wrote different bytes"
            base = statistics.median(w for w, _ in rows["stand-in"])
            for arm in arms:
                wall = statistics.median(w for w, _ in rows[arm])
                ratio = statistics.median(w / s for w, s in rows[arm])
                table.append(f"| {replays} | {arm} | {wall:.3f} | {wall - base:+.3f} | {ratio:.2f}x |")
    finally:
        os.environ.pop("PERFETTO_GRAPH_ANN_EXPORT_FOLLOW", None)
        os.environ.pop("PERFETTO_GRAPH_ANN_EXPORT_SPARE", None)
        shutil.rmtree(tmp, ignore_errors=True)
    load1 = os.getloadavg()
    print(f"load after {load1[0]:.2f} {load1[1]:.2f}; every arm's output the same bytes")
    print("| replays | arm | median s | - stand-in s | / its stand-in write (median) |")
    print("| ---: | --- | ---: | ---: | ---: |")
    print("\n".join(table))


if __name__ == "__main__":
    main()
