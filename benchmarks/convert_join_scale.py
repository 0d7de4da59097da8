"""Benchmark (issue 33): ``convert --annotations`` (a join) of large traces, plain JSON and gzip:
peak RSS and time against ``json.loads``.

    python benchmarks/convert_join_scale.py [--sizes 100M 1G] [--gzip] [--dir /tmp/bench33j] [--keep]

For each size a synthetic decoder trace (``benchmarks/decoder_synth.py``: a calibrated
36-layer graph, 828 kernels a replay with Kineto's 12 args and their flows, as torch 2.11
writes them, times with Kineto's 3 decimals unless ``--float-times``; replays added until the
size is reached) and its sidecar (the graph's nodes with
their scopes, and the replay record) are written once. Fresh processes then each run one thing
and report their own wall time and peak RSS (VmHWM): ``json.loads`` of the file's bytes (read
included; of the decompressed bytes for ``--gzip``), and the CLI's ``convert`` path
(``pipeline.convert.convert_file(trace, out.pftrace, [sidecar])``) twice: with the in-memory
read (``ConvertConfig(two_pass=False)``: every event held, what every joined convert did
before) and the two-pass read (the default). The arms run alternating in one run; outputs are
compared byte for byte. The issue's targets: peak RSS at most the input size (the JSON's) +
300 MB, time at most 1.0x ``json.loads``. A run whose estimated peak exceeds ``--max-gib`` or
the available memory less 4 GiB is skipped and said so.
"""
from __future__ import annotations

import argparse
import datetime
import gzip
import os
import platform
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.proc import HWM_PRELUDE, available_memory, cell, run_child, same_bytes, size_arg  # noqa: E402

_CHILD = HWM_PRELUDE + r"""
import sys, time, json, gzip
what, path, ann, out = sys.argv[1:5]
t = time.perf_counter()
if what == 'json':
    with (gzip.open if path.endswith('.gz') else open)(path, 'rb') as f:
        doc = json.loads(f.read())
else:
    from perfetto_graph_ann.pipeline.convert import ConvertConfig, convert_file
    done = convert_file(path, out, [ann], config=ConvertConfig(two_pass=what == 'two-pass'))
    assert done.stats.reading == ('two-pass' if what == 'two-pass' else 'in memory'), done.stats.reading
print(json.dumps({'s': time.perf_counter() - t, 'rss': hwm()}))
"""

#: Bytes of one replay of the 36-layer decoder (measured: 132 replays, 76 MB).
_PER_REPLAY = 576_000


def decoder_files(out: Path, size: str) -> "tuple[Path, Path]":
    """The decoder trace of about ``size`` (Kineto's times) and its annotations with the replay
    record, written into ``out`` as this benchmark writes them; prints the machine's line."""
    from benchmarks.decoder_synth import decoder_annotations, write_decoder_trace
    from perfetto_graph_ann.annotations.files import save_annotations

    out.mkdir(parents=True, exist_ok=True)
    trace = out / f"decoder_{size}.json"
    launches: list = []
    write_decoder_trace(str(trace), max(1, size_arg(size) // _PER_REPLAY), launches=launches, kineto_times=True)
    ann = save_annotations(out / f"decoder_{size}.annotations.json", decoder_annotations(record=launches))
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, load {os.getloadavg()[0]:.2f}; "
          f"{trace.stat().st_size / 1e6:.0f} MB")
    return trace, Path(ann)












def main() -> None:
    from benchmarks.decoder_synth import decoder_annotations, write_decoder_trace
    from perfetto_graph_ann.annotations.files import save_annotations

    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="+", default=["100M", "1G"])
    ap.add_argument("--gzip", action="store_true", help="convert the trace gzip-compressed (.json.gz)")
    ap.add_argument("--dir", default="/tmp/bench33j")
    ap.add_argument("--keep", action="store_true", help="keep the traces and outputs")
    ap.add_argument("--max-gib", type=float, default=8.0)
    ap.add_argument("--skip", nargs="*", default=[], choices=["json", "in-memory", "two-pass"])
    ap.add_argument("--repeat", type=int, default=1, help="rounds of the arms, alternating")
    ap.add_argument("--float-times", action="store_true",
                    help="times as decoder_trace writes them (shortest float text), not Kineto's 3 decimals")
    args = ap.parse_args()
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, {available_memory() / 2**30:.1f} GiB available, "
          f"Python {platform.python_version()}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
          f"load {os.getloadavg()[0]:.1f}; input: {'gzip' if args.gzip else 'plain JSON'}, times "
          f"{'as floats' if args.float_times else 'with 3 decimals (Kineto)'}", flush=True)
    print("| size | kernels | JSON MB | file MB | json.loads s | json.loads peak MB | in-memory s | in-memory peak MB | "
          "two-pass s | two-pass peak MB | two-pass / json.loads time | two-pass peak - JSON MB | "
          "target (JSON + 300 MB) | same bytes | load |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |")
    arms = [w for w in ("json", "in-memory", "two-pass") if w not in args.skip]
    per_byte = {"json": 7.0, "in-memory": 8.0, "two-pass": 2.0}
    for text in args.sizes:
        replays = max(1, size_arg(text) // _PER_REPLAY)
        plain = folder / f"decoder_{text}.json"
        launches: list = []
        size = write_decoder_trace(str(plain), replays, launches=launches, kineto_times=not args.float_times)
        ann = Path(save_annotations(folder / f"decoder_{text}.annotations.json", decoder_annotations(record=launches)))
        path = plain
        if args.gzip:
            path = folder / f"decoder_{text}.json.gz"
            with open(plain, "rb") as fi, gzip.open(path, "wb", compresslevel=1) as fo:
                shutil.copyfileobj(fi, fo, 1 << 22)
            plain.unlink()
        outs = {w: folder / f"decoder_{text}.{w}.pftrace" for w in arms}
        best: dict = {}
        for _ in range(args.repeat):
            for what in arms:
                limit = min(args.max_gib * 2**30, available_memory() - 4 * 2**30)
                need = per_byte[what] * size + 200e6
                if need > limit:
                    best[what] = {"error": f"skipped: needs ~{need / 2**30:.1f} GiB, limit {limit / 2**30:.1f}"}
                    continue
                r = run_child(_CHILD, [what, path, ann, outs[what]], ROOT)
                if "rss" in r:
                    per_byte[what] = r["rss"] / size
                    if "s" in best.get(what, {}):
                        r["s"] = min(r["s"], best[what]["s"])
                best[what] = r
        j, m, c = (best.get(w, {"error": "not run"}) for w in ("json", "in-memory", "two-pass"))
        ratio = f"{c['s'] / j['s']:.2f}x" if "s" in c and "s" in j else "-"
        over = f"{(c['rss'] - size) / 1e6:,.0f}" if "rss" in c else "-"
        ok = "-"
        if "rss" in c:
            ok = "met" if c["rss"] <= size + 300e6 else f"missed by {(c['rss'] - size - 300e6) / 1e6:,.0f} MB"
        same = "-"
        if "rss" in c and "rss" in m:
            same = "yes" if same_bytes(outs["in-memory"], outs["two-pass"]) else "NO"
        print(f"| {text} | {replays * 828:,} | {size / 1e6:,.0f} | {path.stat().st_size / 1e6:,.0f} | "
              f"{cell(j, 's', 1, '.2f')} | {cell(j, 'rss', 1e6, ',.0f')} | "
              f"{cell(m, 's', 1, '.2f')} | {cell(m, 'rss', 1e6, ',.0f')} | "
              f"{cell(c, 's', 1, '.2f')} | {cell(c, 'rss', 1e6, ',.0f')} | {ratio} | {over} | {ok} | {same} | "
              f"{os.getloadavg()[0]:.1f} |", flush=True)
        if not args.keep:
            for p in [*outs.values(), path, ann]:
                if p.exists():
                    p.unlink()


if __name__ == "__main__":
    main()
