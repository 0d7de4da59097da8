"""Benchmark (issue 33): ``convert`` of large traces, peak RSS and time against ``json.loads``.

    python benchmarks/convert_scale.py [--sizes 100M 1G 4G] [--dir /tmp/bench33] [--keep]

For each size a synthetic trace (``benchmarks/synth.write_large``: a block of the bundled
H200 recordings' patterns, eager CPU ops with shapes, launches, kernels, graph replays with
their flows, NCCL, repeated with shifted times and ids; plain JSON) is written once, then two
fresh processes each run one thing and report their own wall time and peak RSS (VmHWM):
``json.loads`` of the file's bytes (read included), and ``pga.convert(file, out.pftrace)``.
``convert`` runs twice, with the in-memory read (``ConvertConfig(two_pass=False)``, every
event held) and the two-pass read (``read.scan``, the default for a plain JSON file); their
outputs are compared byte for byte. The issue's targets: convert's peak RSS at most the input
size + 300 MB, its time at most 1.0x ``json.loads``. A run whose peak (estimated from the last measured RSS per input byte)
would exceed ``--max-gib`` or the available memory less 4 GiB is skipped and said so, not
started: on a shared machine a 4 GB ``json.loads`` (~20 GB) would take the others' memory. Files are deleted
afterwards unless ``--keep``.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.proc import HWM_PRELUDE, available_memory, cell, run_child, same_bytes, size_arg  # noqa: E402

_CHILD = HWM_PRELUDE + r"""
import sys, time, json
what, path, out = sys.argv[1:4]
t = time.perf_counter()
if what == 'json':
    with open(path, 'rb') as f:
        doc = json.loads(f.read())
else:
    from perfetto_graph_ann.pipeline.convert import ConvertConfig, convert
    stats = convert(path, out, ConvertConfig(two_pass=what == 'two-pass'))
    assert stats.reading == ('two-pass' if what == 'two-pass' else 'in memory'), stats.reading
print(json.dumps({'s': time.perf_counter() - t, 'rss': hwm()}))
"""












def main() -> None:
    from benchmarks.synth import write_large

    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="+", default=["100M", "1G", "4G"])
    ap.add_argument("--dir", default="/tmp/bench33")
    ap.add_argument("--keep", action="store_true", help="keep the traces and outputs")
    ap.add_argument("--max-gib", type=float, default=8.0,
                    help="skip a run whose estimated peak exceeds this (GiB; the machine may be shared), or "
                    "exceeds the available memory less 4 GiB (default: 8)")
    ap.add_argument("--skip", nargs="*", default=[], choices=["json", "in-memory", "two-pass"],
                    help="arms not to run (e.g. in-memory where it would not fit)")
    args = ap.parse_args()
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, {available_memory() / 2**30:.1f} GiB available, "
          f"Python {platform.python_version()}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    print("| size | events | JSON MB | json.loads s | json.loads peak MB | in-memory convert s | in-memory peak MB | "
          "two-pass convert s | two-pass peak MB | two-pass / json.loads time | two-pass peak - input MB | "
          "target (input + 300 MB) | same bytes |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    arms = ("json", "in-memory", "two-pass")
    per_byte = {"json": 6.0, "in-memory": 6.0, "two-pass": 6.0}  # peak RSS per input byte, refined by each run
    for text in args.sizes:
        path = folder / f"scale_{text}.json"
        outs = {w: folder / f"scale_{text}.{w}.pftrace" for w in arms}
        size = size_arg(text)
        limit = min(args.max_gib * 2**30, available_memory() - 4 * 2**30)
        skip = {w: per_byte[w] * size + 200e6 > limit for w in per_byte}
        n = write_large(path, size) if not all(skip.values()) else 0
        size = path.stat().st_size if n else size
        row = {}
        for what in (w for w in arms if w not in args.skip):
            need = per_byte[what] * size + 200e6
            if need > limit:
                row[what] = {"error": f"skipped: needs ~{need / 2**30:.1f} GiB, limit {limit / 2**30:.1f}"}
                continue
            row[what] = run_child(_CHILD, [what, path, outs[what]], ROOT)
            if "rss" in row[what]:
                per_byte[what] = row[what]["rss"] / size
        j, m, c = (row.get(w, {"error": "not run"}) for w in arms)
        ratio = f"{c['s'] / j['s']:.2f}x" if "s" in c and "s" in j else "-"
        over = f"{(c['rss'] - size) / 1e6:,.0f}" if "rss" in c else "-"
        ok = "-"
        if "rss" in c:
            ok = "met" if c["rss"] <= size + 300e6 else f"missed by {(c['rss'] - size - 300e6) / 1e6:,.0f} MB"
        same = "-"
        if "rss" in c and "rss" in m:
            same = "yes" if same_bytes(outs["in-memory"], outs["two-pass"]) else "NO"
        print(f"| {text} | {n:,} | {size / 1e6:,.0f} | {cell(j, 's', 1, '.2f')} | {cell(j, 'rss', 1e6, ',.0f')} | "
              f"{cell(m, 's', 1, '.2f')} | {cell(m, 'rss', 1e6, ',.0f')} | "
              f"{cell(c, 's', 1, '.2f')} | {cell(c, 'rss', 1e6, ',.0f')} | {ratio} | {over} | {ok} | {same} |",
              flush=True)
        for o in outs.values():
            if not args.keep and o.exists():
                o.unlink()
        if not args.keep and path.exists():
            path.unlink()


if __name__ == "__main__":
    main()
