"""Benchmark: convert vs a plain ``json.load`` of the same file, output size, peak RSS
(default: Kineto's list args as JSON text; and the full-fidelity ``ConvertConfig(list_args="typed")``).

    python benchmarks/convert.py [--events 120000] [--graph-events 200000] [--repeat 3] [--fresh 5]

For each bundled fixture, a large synthetic trace (``benchmarks/synth.py``: eager CPU ops with
``record_shapes`` arrays, launches, kernels, graph replays, NCCL) and a large kernel-heavy
one (``--graph-events``: the CUDA-graph replays of ``seed_block_annotated`` repeated with fresh
correlations, i.e. kernels, their launches and ``ac2g`` flows; 0 leaves it out) it measures,
in one run: ``json.load`` time of the (decompressed) file, ``read_trace`` alone, convert time (read + write,
fast encoder; also the perfetto.protos reference encoder on the synthetic trace), events
per second, the time ratio, output bytes vs raw and gzipped JSON, and the peak RSS of a
conversion in a fresh process. Best of ``--repeat`` runs for each timing. ``--fresh N``: also
``json.load`` and ``convert()`` of the graph trace as the first call of N fresh processes each.
"""
from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.synth import dumps, make_trace, write_trace  # noqa: E402
from perfetto_graph_ann._resources import demo_data_dir  # noqa: E402
from perfetto_graph_ann.read.kineto import parse_trace_bytes, read_trace  # noqa: E402
from perfetto_graph_ann.pipeline.convert import ConvertConfig, convert  # noqa: E402
from perfetto_graph_ann.write.pftrace import paused_gc  # noqa: E402
from perfetto_graph_ann.write.perfetto import WriterConfig, write_perfetto  # noqa: E402


#: The kernel-heavy workload: CUDA-graph replays only (the product's main use case).
GRAPH_FIXTURES = ("seed_block_annotated",)


def interleaved(fns: dict, repeat: int) -> dict:
    """Run each function once per round, ``repeat`` rounds; best wall and CPU time of each.

    Interleaving keeps a noisy, shared machine from favouring whichever ran in a quiet
    moment; CPU time (``process_time``) is less sensitive to other jobs than wall time.
    """
    wall = {k: float("inf") for k in fns}
    cpu = dict(wall)
    for _ in range(repeat):
        for k, fn in fns.items():
            w, c = time.perf_counter(), time.process_time()
            fn()
            wall[k] = min(wall[k], time.perf_counter() - w)
            cpu[k] = min(cpu[k], time.process_time() - c)
    return {"wall": wall, "cpu": cpu}


_RSS = ("import sys; {}; print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])")


def peak_rss_mb(src: Path, out: Path) -> float:
    """Peak RSS (MB) of a fresh process converting ``src``."""
    code = _RSS.format("from perfetto_graph_ann.pipeline.convert import convert; convert(sys.argv[1], sys.argv[2])")
    r = subprocess.run([sys.executable, "-c", code, str(src), str(out)], capture_output=True, text=True, check=True)
    return int(r.stdout.strip()) / 1024


def json_rss_mb(src: Path) -> float:
    """Peak RSS (MB) of a fresh process doing ``json.load`` of ``src`` (the reference)."""
    code = _RSS.format("import json; json.load(open(sys.argv[1], 'rb'))")
    r = subprocess.run([sys.executable, "-c", code, str(src)], capture_output=True, text=True, check=True)
    return int(r.stdout.strip()) / 1024


def in_memory(raw: bytes, enc: str) -> None:
    """Parse + write to memory: the conversion itself, without file I/O and fsync."""
    trace = parse_trace_bytes(raw)
    write_perfetto(trace, io.BytesIO(), None, WriterConfig(encoder=enc, progress=False))


def row(name: str, json_path: Path, tmp: Path, repeat: int, encoders=("fast",)) -> dict:
    raw = json_path.read_bytes()
    n_events = len(json.loads(raw)["traceEvents"])
    out = tmp / f"{name}.pftrace"
    def plain_json_load():
        with open(json_path, "rb") as f:
            json.load(f)
    def read_only():  # convert's first half, as convert runs it (GC paused)
        with paused_gc():
            read_trace(json_path)
    fns = {"json": plain_json_load, "read": read_only}
    for enc in encoders:
        fns[f"file_{enc}"] = lambda enc=enc: convert(json_path, out, ConvertConfig(encoder=enc, progress=False))

        def mem(enc=enc):
            with paused_gc():
                in_memory(raw, enc)
        fns[f"mem_{enc}"] = mem
    typed = tmp / f"{name}.typed.pftrace"
    fns["file_typed"] = lambda: convert(json_path, typed, ConvertConfig(list_args="typed", progress=False))
    t = interleaved(fns, repeat)
    convert(json_path, out, ConvertConfig(progress=False))
    return {"out_typed": typed.stat().st_size, "name": name, "events": n_events, "raw": len(raw), "gz": len(gzip.compress(raw, 6)), "t": t,
            "out": out.stat().st_size, "out_gz": len(gzip.compress(out.read_bytes(), 6)),
            "rss_mb": peak_rss_mb(json_path, out), "json_rss_mb": json_rss_mb(json_path)}


_FRESH = ("import sys, time{imp}; c = time.process_time(); {call}; print(time.process_time() - c)")


def fresh_cpu(src: Path, out: Path, runs: int) -> dict:
    """CPU time of ``json.load`` and of ``convert()`` as the first thing a fresh process does
    (the way a user compares them), ``runs`` processes each, alternating."""
    calls = {"json": _FRESH.format(imp=", json", call="json.load(open(sys.argv[1], 'rb'))"),
             "convert": _FRESH.format(imp="; from perfetto_graph_ann.pipeline.convert import convert, ConvertConfig",
                                      call="convert(sys.argv[1], sys.argv[2], ConvertConfig(progress=False))")}
    got: dict = {k: [] for k in calls}
    for _ in range(runs):
        for k, code in calls.items():
            r = subprocess.run([sys.executable, "-c", code, str(src), str(out)], capture_output=True, text=True, check=True)
            got[k].append(float(r.stdout.strip()))
    return got


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=120_000)
    ap.add_argument("--graph-events", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--fresh", type=int, default=5,
                    help="fresh processes each for json.load / convert() of the graph trace (0: skip)")
    a = ap.parse_args()
    fresh = None
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for p in sorted(demo_data_dir().glob("*.trace.json.gz")):
            name = p.name[: -len(".trace.json.gz")]
            plain = tmp / f"{name}.json"
            plain.write_bytes(gzip.decompress(p.read_bytes()))
            rows.append(row(name, plain, tmp, a.repeat))
        synth = write_trace(tmp / "synthetic.json", a.events)
        rows.append(row(f"synthetic {a.events // 1000}k", synth, tmp, a.repeat, encoders=("fast", "protos")))
        if a.graph_events:
            graph = tmp / "graph.json"
            graph.write_bytes(dumps(make_trace(a.graph_events, fixtures=GRAPH_FIXTURES)))
            rows.append(row(f"graph replays {a.graph_events // 1000}k", graph, tmp, a.repeat))
            if a.fresh:
                fresh = fresh_cpu(graph, tmp / "fresh.pftrace", a.fresh)
    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("Times: best of the interleaved rounds; CPU = process_time, wall in parentheses.\n")
    print("| trace | events | raw JSON MB | json.load s | convert file->file s | ratio | in memory s | ratio "
          "| events/s (in memory, CPU) | out / raw JSON | out / gzipped JSON | out.gz / raw JSON "
          "| peak RSS MB convert | peak RSS MB json.load | typed: convert file->file ratio | typed: out / raw JSON "
          "| read_trace only s | ratio |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        c, w = r["t"]["cpu"], r["t"]["wall"]
        print(f"| {r['name']} | {r['events']} | {r['raw'] / 1e6:.2f} | {c['json']:.4f} ({w['json']:.4f}) | "
              f"{c['file_fast']:.4f} ({w['file_fast']:.4f}) | {c['file_fast'] / c['json']:.2f} | "
              f"{c['mem_fast']:.4f} ({w['mem_fast']:.4f}) | {c['mem_fast'] / c['json']:.2f} | "
              f"{r['events'] / c['mem_fast']:,.0f} | {r['out'] / r['raw']:.3f} | {r['out'] / r['gz']:.2f} | "
              f"{r['out_gz'] / r['raw']:.3f} | {r['rss_mb']:.0f} | {r['json_rss_mb']:.0f} | "
              f"{c['file_typed'] / c['json']:.2f} | {r['out_typed'] / r['raw']:.3f} | "
              f"{c['read']:.4f} ({w['read']:.4f}) | {c['read'] / c['json']:.2f} |")
    s = next(r for r in rows if "file_protos" in r["t"]["cpu"])
    c = s["t"]["cpu"]
    print(f"\nperfetto.protos reference encoder on {s['name']} (CPU): file->file {c['file_protos']:.3f} s "
          f"({c['file_protos'] / c['json']:.2f}x json.load), in memory {c['mem_protos']:.3f} s "
          f"({c['mem_protos'] / c['json']:.2f}x); hand-written encoder {c['file_fast'] / c['json']:.2f}x / "
          f"{c['mem_fast'] / c['json']:.2f}x")

    if fresh:
        j, c = sorted(fresh["json"]), sorted(fresh["convert"])
        print(f"\nfresh processes, graph replays (CPU of the call, {len(j)} each, alternating): json.load "
              f"{j[0]:.3f}-{j[-1]:.3f} s (median {j[len(j) // 2]:.3f}), convert() {c[0]:.3f}-{c[-1]:.3f} s "
              f"(median {c[len(c) // 2]:.3f}): median ratio {c[len(c) // 2] / j[len(j) // 2]:.2f}")


if __name__ == "__main__":
    main()
