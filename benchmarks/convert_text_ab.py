"""Benchmark (issue 33): the second pass framing a replay's kernels from their JSON text
(``emit.TEXT_EVENTS``, session 27) on against off, in one process.

    python benchmarks/convert_text_ab.py [--size 100M] [--rounds 5] [--dir /tmp/bench33t] [--keep]

On ``benchmarks/decoder_synth.py``'s decoder trace of ``--size`` (Kineto's times, its replay
record: as ``convert_join_scale.py`` writes it), one process converts it with its annotations
(the CLI's ``convert_file``: two passes), alternating the arms each round: ``on`` (the text
path) and ``off`` (every event of the second pass decoded, then encoded). Wall seconds, medians
and bests over ``--rounds``, with ``json.loads`` of the file's bytes (read included) timed in
the same rounds; the two arms' outputs compared byte for byte.
"""
from __future__ import annotations

import argparse
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
from perfetto_graph_ann.write.perfetto import emit  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="100M")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", default="/tmp/bench33t")
    ap.add_argument("--keep", action="store_true", help="keep the trace and outputs")
    args = ap.parse_args()
    if emit.TEXT_EVENTS is None:
        sys.exit("the compiled packet loop (_encode) is not built or is turned off")
    out = Path(args.dir)
    trace, ann = decoder_files(out, args.size)
    times: dict = {"json.loads": [], "on": [], "off": []}
    same = True
    for r in range(args.rounds):
        t = time.perf_counter()
        with open(trace, "rb") as f:
            json.loads(f.read())
        times["json.loads"].append(time.perf_counter() - t)
        got = {}
        for arm in (("on", "off") if r % 2 == 0 else ("off", "on")):
            emit.TEXT_EVENTS = True if arm == "on" else None
            dst = out / f"{arm}.pftrace"
            t = time.perf_counter()
            convert_file(str(trace), str(dst), [str(ann)])
            times[arm].append(time.perf_counter() - t)
            got[arm] = dst.read_bytes()
        same = same and got["on"] == got["off"]
    emit.TEXT_EVENTS = True
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"load after {os.getloadavg()[0]:.2f}")
    print("| arm | median s | best s | / `json.loads` (medians) | same bytes |")
    print("| --- | ---: | ---: | ---: | --- |")
    for k, v in times.items():
        print(f"| {k} | {med[k]:.3f} | {min(v):.3f} | {med[k] / med['json.loads']:.2f}x | "
              f"{'' if k == 'json.loads' else 'yes' if same else 'NO'} |")
    print(f"| on / off | {med['on'] / med['off']:.2f}x | | | |")
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
