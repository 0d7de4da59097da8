"""Benchmark (issue 33): ``merge`` of joined ranks, each read in two passes or in memory.

    python benchmarks/merge_scale.py [--size 100M] [--ranks 2] [--dir /tmp/bench33merge]

``--ranks`` copies of a synthetic decoder trace (``decoder_synth.write_decoder_trace``,
Kineto's times) of ``--size`` and its sidecar; fresh processes run
``pipeline.merge.merge(traces, out, [annotations] * ranks)`` with ``two_pass=False`` (every
event of a rank held while it converts: before) and ``True`` (the default), alternating,
and report wall time and peak RSS (VmHWM); the outputs are compared byte for byte.
"""
from __future__ import annotations

import argparse
import datetime
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.proc import HWM_PRELUDE, run_child, size_arg  # noqa: E402

_CHILD = HWM_PRELUDE + r"""
import sys, time, json
two_pass, ann, out, *paths = sys.argv[1:]
from perfetto_graph_ann.annotations.files import load_annotations
from perfetto_graph_ann.pipeline.merge import merge
t = time.perf_counter()
a = load_annotations(ann)
merge(paths, out, [a] * len(paths), two_pass=two_pass == '1')
print(json.dumps({'s': time.perf_counter() - t, 'rss': hwm()}))
"""


def main() -> None:
    from benchmarks.convert_join_scale import _PER_REPLAY
    from benchmarks.decoder_synth import decoder_annotations, write_decoder_trace
    from perfetto_graph_ann.annotations.files import save_annotations

    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="100M")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--dir", default="/tmp/bench33merge")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    first = folder / "rank0.json"
    launches: list = []
    size = write_decoder_trace(str(first), max(1, size_arg(args.size) // _PER_REPLAY), launches=launches,
                               kineto_times=True)
    ann = save_annotations(folder / "decoder.annotations.json", decoder_annotations(record=launches))
    paths = [first]
    for r in range(1, args.ranks):
        paths.append(folder / f"rank{r}.json")
        shutil.copyfile(first, paths[-1])
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, load {os.getloadavg()[0]:.1f}, "
          f"{args.ranks} ranks of {size / 1e6:,.0f} MB")
    print("| arm | s | peak MB | peak - one rank's JSON MB |")
    print("| --- | ---: | ---: | ---: |")
    outs = {}
    for _ in range(args.repeat):
        for two_pass in ("0", "1"):
            out = folder / f"merged.{two_pass}.pftrace"
            r = run_child(_CHILD, [two_pass, ann, out, *paths], ROOT)
            if "error" in r:
                print(f"| {'two-pass' if two_pass == '1' else 'in memory'} | {r['error']} | | |")
                continue
            outs[two_pass] = out
            print(f"| {'two-pass' if two_pass == '1' else 'in memory'} | {r['s']:.2f} | {r['rss'] / 1e6:,.0f} | "
                  f"{(r['rss'] - size) / 1e6:,.0f} |", flush=True)
    if len(outs) == 2:
        print("same bytes:", outs["0"].read_bytes() == outs["1"].read_bytes())
    shutil.rmtree(folder)


if __name__ == "__main__":
    main()
