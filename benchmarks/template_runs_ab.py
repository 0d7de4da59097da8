"""Benchmark (issue 33): a node's whole-args template built in C (``_encode.template_runs``)
against ``FastArgs._template`` in Python, on what ``pga.export`` runs after torch's JSON.

    python benchmarks/template_runs_ab.py [--recorded T1 T7 HF20] [--synthetic 828x1 828x7 1656x20] [--rounds 9]
    python benchmarks/template_runs_ab.py --micro [--rounds 15]

Every node of a graph misses the writer's whole-args template cache once, at the graph's first
replay, and its template is built there arg by arg; on small profiles (a few replays, as
``trace_handler`` exports each cycle) that is a large share of the write. Arms, alternating
each round after one untimed write: ``python`` (``fast_args.template_runs`` set to None: each
arg through ``FastArgs._one``) and ``compiled`` (each arg from its key's cache in C, a new int
encoded there; ``_one`` only for the rest). Each arm runs ``convert.write_joined_file`` on the
JSON in a temporary file. Medians; ``json.loads`` of the same bytes in the same rounds; the
arms' outputs compared byte for byte.

``--micro``: ``FastArgs._template`` alone, each arm on 2,000 args of a joined graph kernel (the
H200 decoder's 20 args, each with its own ``graph node id``) after one untimed call: microseconds
a template, medians of the rounds.

``--recorded NAME``: ``.bench-data/NAME.json.gz`` with ``.bench-data/NAME.annotations.json``
(profiles recorded on the GPU machine by ``benchmarks/gpu/record_export_trace.py``; not in the
repository). ``--synthetic NODESxREPLAYS``: ``benchmarks/decoder_synth.py``'s calibrated
decoder (23 kernel nodes a layer, its replay record).
"""
from __future__ import annotations

import argparse
import datetime
import gzip
import hashlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from decoder_synth import decoder_annotations, write_decoder_trace  # noqa: E402

from perfetto_graph_ann.annotations.files import load_annotations  # noqa: E402
from perfetto_graph_ann.pipeline.convert import write_joined_file  # noqa: E402
from perfetto_graph_ann.write.perfetto import fast_args  # noqa: E402


def _inputs(args, tmp: str):
    """(label, JSON path, annotations) of each input, its JSON written to ``tmp``."""
    for name in args.recorded:
        src = os.path.join(tmp, f"{name}.json")
        Path(src).write_bytes(gzip.decompress((ROOT / ".bench-data" / f"{name}.json.gz").read_bytes()))
        yield f"recorded {name}", src, load_annotations(str(ROOT / ".bench-data" / f"{name}.annotations.json"))
    for shape in args.synthetic:
        nodes, replays = (int(x) for x in shape.split("x"))
        layers = max(1, round(nodes / 23))
        src = os.path.join(tmp, f"synthetic_{shape}.json")
        launches: list = []
        write_decoder_trace(src, replays, layers, launches=launches, kineto_times=True)
        yield f"synthetic {layers * 23} nodes x {replays}", src, decoder_annotations(layers, record=launches)


#: a joined graph kernel's args, as the H200 decoder's profile has them
KERNEL_ARGS = {"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": 35, "registers per thread": 32,
               "shared memory": 0, "blocks per SM": 0.015152, "warps per SM": 0.060606, "grid": [2, 1, 1],
               "block": [128, 1, 1], "est. achieved occupancy %": 0, "name": "attn", "layer": 5, "graph id": 2,
               "graph node id": 8589934709, "replay": 0, "join": "calibrated", "original_stream": 7,
               "critical path": True}


def _micro(rounds: int, compiled) -> None:
    """Microseconds a template of :data:`KERNEL_ARGS` with a new node id, each arm."""
    from perfetto_graph_ann.write.perfetto.interning import Interner

    argss = [dict(KERNEL_ARGS, **{"graph node id": KERNEL_ARGS["graph node id"] + i}) for i in range(2000)]
    times: dict = {"python": [], "compiled": []}
    for r in range(rounds):
        for arm in (("python", "compiled") if r % 2 == 0 else ("compiled", "python")):
            fast_args.template_runs = compiled if arm == "compiled" else None
            enc = fast_args.FastArgs(Interner(), list_text=True)
            enc._template(KERNEL_ARGS)  # untimed: each key's first value
            t = time.perf_counter()
            for a in argss:
                enc._template(a)
            times[arm].append((time.perf_counter() - t) / len(argss) * 1e6)
    fast_args.template_runs = compiled
    p, c = statistics.median(times["python"]), statistics.median(times["compiled"])
    print(f"| template of a kernel's {len(KERNEL_ARGS)} args | python {p:.2f} us | compiled {c:.2f} us | {c / p:.2f}x |")


def machine_line() -> str:
    return (f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, load {os.getloadavg()[0]:.2f}")


def compare_arms(args, arms: Tuple[str, str], set_up: Callable[[str, Any], None], prefix: str,
                 inputs: Callable = _inputs) -> None:
    """Print a Markdown row per input (``--recorded``, ``--synthetic``): ``write_joined_file``
    under each of the two ``arms``, alternating each round after one untimed write,
    ``set_up(arm, annotations)`` before each timed one; medians, ``json.loads`` of the same
    bytes in the same rounds, and whether every write gave the same bytes. Temporary files in
    a folder named ``prefix...``, removed at the end. ``inputs(args, tmp)``: (label, JSON path,
    annotations) of each input (default: :func:`_inputs`)."""
    a, b = arms
    print(f"| input | MB of JSON | `json.loads` s | {a} s | {b} s | {b} / {a} "
          f"| {a} / `json.loads` | {b} / `json.loads` | same bytes |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        for label, src, ann in inputs(args, tmp):
            raw = Path(src).read_bytes()
            write_joined_file(src, os.path.join(tmp, "warm.pftrace"), ann, "all", label=label)  # untimed
            times: dict = {a: [], b: [], "json": []}
            digests = set()
            for r in range(args.rounds):
                t = time.perf_counter()
                json.loads(raw)
                times["json"].append(time.perf_counter() - t)
                for name in ((a, b) if r % 2 == 0 else (b, a)):
                    set_up(name, ann)
                    dst = os.path.join(tmp, f"{name}.pftrace")
                    t = time.perf_counter()
                    write_joined_file(src, dst, ann, "all", label=label)
                    times[name].append(time.perf_counter() - t)
                    digests.add(hashlib.sha256(Path(dst).read_bytes()).hexdigest())
            j, p, c = (statistics.median(times[k]) for k in ("json", a, b))
            print(f"| {label} | {len(raw) / 1e6:.1f} | {j:.4f} | {p:.4f} | {c:.4f} | {c / p:.2f}x | {p / j:.2f}x | "
                  f"{c / j:.2f}x | {'yes' if len(digests) == 1 else 'NO'} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recorded", nargs="*", default=["t1", "t7", "hf20"])
    ap.add_argument("--synthetic", nargs="*", default=["828x1", "828x7", "1656x20"])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--micro", action="store_true", help="FastArgs._template alone (see the docstring)")
    args = ap.parse_args()
    compiled = fast_args.template_runs
    if compiled is None:
        sys.exit("the compiled writer (_encode) is not built here: nothing to compare")
    print(machine_line())
    if args.micro:
        _micro(args.rounds, compiled)
        return

    def arm(name: str, ann) -> None:
        fast_args.template_runs = compiled if name == "compiled" else None

    try:
        compare_arms(args, ("python", "compiled"), arm, "pga-template-runs-")
    finally:
        fast_args.template_runs = compiled
    print(f"load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
