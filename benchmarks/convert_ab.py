"""A/B benchmark of the converter: this checkout's code against a git revision, in one process.

    python benchmarks/convert_ab.py [--base HEAD] [--graph-events 200000] [--events 120000] [--repeat 8]

The base revision's ``perfetto_graph_ann`` package is extracted with ``git archive`` into a
temporary folder and imported under another name (the package imports itself relatively), so
both versions run alternately on the same bytes, round after round: a change is kept only when
it is faster here *and* writes the same bytes. For each trace (the kernel-heavy CUDA-graph
replays of ``benchmarks/convert.py --graph-events`` and the eager-heavy synthetic trace) it
times, GC paused as ``convert`` runs them, best of ``--repeat`` rounds, CPU time
(``process_time``; wall in parentheses):

* ``read``: ``parse_trace_bytes`` of the JSON bytes (file reading left out);
* ``write``: ``write_perfetto`` of an already read trace (each version its own) to memory;
* ``write+layout`` (graph replays only): the same with the join's layout of the bundled
  ``seed_block_annotated`` capture record (``--graph-lanes all``; joined once by this checkout);
* ``free``: dropping a read trace;
* ``convert``: ``convert()`` file to file (read, write with fsync, free).

and checks that both versions give the same events (field by field) and the same output bytes
(fast and protos encoders, list args as text and typed).
"""
from __future__ import annotations

import argparse
import gc
import importlib
import io
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import perfetto_graph_ann as pga  # noqa: E402
from benchmarks.synth import dumps, make_trace  # noqa: E402
from perfetto_graph_ann._resources import demo_data_dir  # noqa: E402
from perfetto_graph_ann.join import join  # noqa: E402

BASE_NAME = "pga_base"
FIELDS = ("index", "ph", "cat", "name", "pid", "tid", "ts_ns", "dur_ns", "args", "id", "extra")


def load_base(rev: str, into: Path):
    """Import the package as of ``rev`` under the name :data:`BASE_NAME`, with its C extensions
    built from its own sources where it has a ``hatch_build.py`` (``git archive`` carries no
    built extension: without this the base would run its pure-Python paths)."""
    paths = ["perfetto_graph_ann"]
    if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{rev}:hatch_build.py"]).returncode == 0:
        paths.append("hatch_build.py")
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, *paths], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(into, filter="data")
    if "hatch_build.py" in paths:
        built = subprocess.run([sys.executable, str(into / "hatch_build.py")], cwd=into, capture_output=True, text=True)
        if built.returncode != 0:
            print(f"base {rev}: its C extensions did not build, it runs pure Python:\n{built.stderr[-500:]}",
                  file=sys.stderr)
    (into / "perfetto_graph_ann").rename(into / BASE_NAME)
    sys.path.insert(0, str(into))
    return importlib.import_module(BASE_NAME)


class Side:
    """One version's reader, writer and convert."""

    def __init__(self, pkg: str):
        self.kineto = importlib.import_module(f"{pkg}.read.kineto")
        self.perfetto = importlib.import_module(f"{pkg}.write.perfetto")
        try:  # paused_gc's module: write.pftrace, write.convert before the pipeline existed
            self.convert = importlib.import_module(f"{pkg}.write.pftrace")
        except ImportError:
            self.convert = importlib.import_module(f"{pkg}.write.convert")
        try:  # convert() itself: pipeline.convert since the pipeline exists
            self.convert_fn = importlib.import_module(f"{pkg}.pipeline.convert").convert
        except ImportError:
            self.convert_fn = self.convert.convert

    def read(self, raw: bytes):
        return self.kineto.parse_trace_bytes(raw)

    def write(self, trace, encoder: str = "fast", list_args: str = "text", layout=None) -> bytes:
        buf = io.BytesIO()
        fields = self.perfetto.WriterConfig.__dataclass_fields__
        if "list_args" in fields:
            cfg = self.perfetto.WriterConfig(encoder=encoder, progress=False, list_args=list_args)
        else:  # a revision before list_args: its nearest mode (text there covered the shape args only)
            shape = "typed" if list_args == "typed" else "string"
            cfg = self.perfetto.WriterConfig(encoder=encoder, progress=False, shape_args=shape)
        self.perfetto.write_perfetto(trace, buf, layout, cfg)
        return buf.getvalue()


def timed(fn: Callable[[], object]) -> tuple:
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.process_time() - c, time.perf_counter() - w


def check_same(name: str, raw: bytes, a: Side, b: Side, join=None) -> None:
    """Same events field by field, same bytes with every encoder and arg mode (and with the
    join's layout when ``join`` gives one)."""
    ta, tb = a.read(raw), b.read(raw)
    assert len(ta.events) == len(tb.events) and ta.metadata == tb.metadata, name
    for x, y in zip(ta.events, tb.events):
        vx, vy = [getattr(x, f) for f in FIELDS], [getattr(y, f) for f in FIELDS]
        assert vx == vy, (name, vx, vy)
    for enc in ("fast", "protos"):
        for mode in ("typed", "text"):
            assert a.write(ta, enc, mode) == b.write(tb, enc, mode), (name, enc, mode)
            if join is not None:
                assert a.write(ta, enc, mode, join(ta)) == b.write(tb, enc, mode, join(tb)), (name, enc, mode, "layout")
    print(f"{name}: same events and bytes (fast/protos x typed/text)", flush=True)


def ab(name: str, path: Path, a: Side, b: Side, repeat: int, tmp: Path, join=None) -> Dict[str, Dict[str, tuple]]:
    raw = path.read_bytes()
    best: Dict[str, Dict[str, tuple]] = {"base": {}, "new": {}}
    with a.convert.paused_gc():
        traces = {"base": a.read(raw), "new": b.read(raw)}
        layouts = {k: join(t) for k, t in traces.items()} if join is not None else {}
    for _ in range(repeat):
        for label, side in (("base", a), ("new", b)):
            got = best[label]
            with side.convert.paused_gc():
                t = timed(lambda: side.read(raw))
                got["read"] = min(got.get("read", t), t)
                t = timed(lambda: side.write(traces[label]))
                got["write"] = min(got.get("write", t), t)
                if layouts:
                    t = timed(lambda: side.write(traces[label], layout=layouts[label]))
                    got["write+layout"] = min(got.get("write+layout", t), t)
                tr = side.read(raw)
                c, w = time.process_time(), time.perf_counter()
                del tr
                t = (time.process_time() - c, time.perf_counter() - w)
                got["free"] = min(got.get("free", t), t)
            out = tmp / f"{label}.pftrace"
            cfg = side.convert.ConvertConfig(progress=False)
            t = timed(lambda: side.convert_fn(path, out, cfg))
            got["convert"] = min(got.get("convert", t), t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="HEAD", help="git revision to compare against (default HEAD)")
    ap.add_argument("--graph-events", type=int, default=200_000)
    ap.add_argument("--events", type=int, default=120_000, help="synthetic eager-heavy trace; 0 leaves it out")
    ap.add_argument("--repeat", type=int, default=8)
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        load_base(opts.base, tmp / "base")
        a, b = Side(BASE_NAME), Side("perfetto_graph_ann")
        traces = {}
        joins = {}
        if opts.graph_events:
            graph = f"graph replays {opts.graph_events // 1000}k"
            traces[graph] = make_trace(opts.graph_events, fixtures=("seed_block_annotated",))
            ann = pga.load_annotations(demo_data_dir() / "seed_block_annotated.capture.json")
            joins[graph] = lambda trace: join(trace, ann, graph_lanes="all")  # duck-typed: either version's trace
        if opts.events:
            traces[f"synthetic {opts.events // 1000}k"] = make_trace(opts.events)
        results = {}
        for name, doc in traces.items():
            path = tmp / "trace.json"
            path.write_bytes(dumps(doc))
            del doc
            gc.collect()
            check_same(name, path.read_bytes(), a, b, joins.get(name))
            results[name] = ab(name, path, a, b, opts.repeat, tmp, joins.get(name))
            path.unlink()
    print(f"\nmachine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, base {opts.base}, best of {opts.repeat}, "
          f"CPU s (wall s)")
    print("| trace | step | base | new | new / base |")
    print("| --- | --- | ---: | ---: | ---: |")
    for name, r in results.items():
        for step in ("read", "write", "write+layout", "free", "convert"):
            if step not in r["base"]:
                continue
            (cb, wb), (cn, wn) = r["base"][step], r["new"][step]
            print(f"| {name} | {step} | {cb:.4f} ({wb:.4f}) | {cn:.4f} ({wn:.4f}) | {cn / cb:.3f} |")


if __name__ == "__main__":
    main()
