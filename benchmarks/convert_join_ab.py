"""A/B of the joined ``convert`` (issue 33): this checkout against a git revision, imported under
another name, alternating round by round on one synthetic decoder trace.

    python benchmarks/convert_join_ab.py [--base main] [--size 100M] [--dir /tmp/bench33ab] [--rounds 4]

The trace and its annotations are ``benchmarks/convert_join_scale.py``'s (a calibrated 36-layer
decoder graph replayed until ``--size``; written once into ``--dir``, reused when there).
Per round and side: ``pipeline.convert.convert_file(trace, out.pftrace, [annotations])`` with
the two-pass read (the default, what the CLI runs), wall and CPU time (``process_time``),
and ``json.loads`` of the file's bytes (read included) once per round as the yardstick.
Checks that both sides write the same bytes. Prints load average before and after, best and
median per side, and the ratios. The base side runs its own code only, its C extensions built from its
own sources (``convert_ab.load_base``): a revision without
``write/perfetto/_encode.c`` writes with the pure-Python encoder.
"""
from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import json
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

from benchmarks.convert_ab import BASE_NAME, load_base  # noqa: E402
from benchmarks.proc import same_bytes, size_arg  # noqa: E402

#: Bytes of one replay of the 36-layer decoder (``convert_join_scale._PER_REPLAY``).
_PER_REPLAY = 576_000


def _inputs(folder: Path, size: str) -> tuple:
    """(trace, annotations) for ``size``, written once."""
    from benchmarks.decoder_synth import decoder_annotations, write_decoder_trace
    from perfetto_graph_ann.annotations.files import save_annotations

    trace = folder / f"decoder_{size}.json"
    ann = folder / f"decoder_{size}.annotations.json"
    if not (trace.exists() and ann.exists()):
        launches: list = []
        write_decoder_trace(str(trace), max(1, size_arg(size) // _PER_REPLAY), launches=launches, kineto_times=True)
        save_annotations(ann, decoder_annotations(record=launches))
    return trace, ann


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="main")
    ap.add_argument("--size", default="100M")
    ap.add_argument("--dir", default="/tmp/bench33ab")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    trace, ann = _inputs(folder, args.size)
    base_dir = tempfile.mkdtemp(prefix="pga-convert-join-ab-")
    atexit.register(shutil.rmtree, base_dir, True)
    load_base(args.base, Path(base_dir))
    sides = {name: importlib.import_module(f"{pkg}.pipeline.convert")
             for name, pkg in (("base", BASE_NAME), ("head", "perfetto_graph_ann"))}
    outs = {name: folder / f"ab_{name}.pftrace" for name in sides}
    load0 = os.getloadavg()
    print(f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, load {load0[0]:.2f} {load0[1]:.2f}; "
          f"{trace.name} {trace.stat().st_size / 1e6:.0f} MB; base = {args.base}", flush=True)
    wall = {k: [] for k in (*sides, "json")}
    cpu = {k: [] for k in (*sides, "json")}
    for rnd in range(args.rounds):
        order = ("base", "head") if rnd % 2 == 0 else ("head", "base")
        for name in (*order, "json"):
            gc.collect()
            w, c = time.perf_counter(), time.process_time()
            if name == "json":
                with open(trace, "rb") as f:
                    doc = json.loads(f.read())
                del doc
            else:
                mod = sides[name]
                mod.convert_file(str(trace), str(outs[name]), [str(ann)], config=mod.ConvertConfig(two_pass=True))
            wall[name].append(time.perf_counter() - w)
            cpu[name].append(time.process_time() - c)
    same = same_bytes(str(outs["base"]), str(outs["head"]))
    load1 = os.getloadavg()
    print(f"same output bytes: {same}; load after {load1[0]:.2f} {load1[1]:.2f}")
    print("| arm | wall best s | wall median s | CPU best s | CPU median s | wall median / json.loads |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    jm = statistics.median(wall["json"])
    for name in ("json", "base", "head"):
        print(f"| {'json.loads' if name == 'json' else name} | {min(wall[name]):.2f} | {statistics.median(wall[name]):.2f} | "
              f"{min(cpu[name]):.2f} | {statistics.median(cpu[name]):.2f} | {statistics.median(wall[name]) / jm:.2f}x |")
    print(f"head / base: wall medians {statistics.median(wall['head']) / statistics.median(wall['base']):.2f}x, "
          f"CPU medians {statistics.median(cpu['head']) / statistics.median(cpu['base']):.2f}x")
    for p in outs.values():
        p.unlink(missing_ok=True)
    if not same:
        sys.exit("the two sides wrote different bytes")


if __name__ == "__main__":
    main()
