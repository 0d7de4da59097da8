"""Benchmark (issue 33): the first export in a process, where the export's imports are paid.

    python benchmarks/first_export_imports.py [--recorded t1 t7] [--rounds 9] [--no-torch]

What ``pga.export`` / ``trace_handler`` / the background worker run after torch's JSON
(``convert.write_joined_file``), in a fresh process each time: torch imported first where it
is installed (untimed: a profiled program has it, and it brings numpy), the annotations loaded
(untimed: ``pga.export`` has them in memory), then, timed, the imports of the export's modules
and the first write; then a second write of the same file in the same process (a later export,
for comparison). Arms, alternating: ``protos classes first`` (``perfetto_trace_pb2`` imported
at the start of the timed part, as every write did until session 35, when the tracks, the
sequences' opening packets and the sorting marks were built with the ``perfetto.protos``
classes) and ``as shipped``. Inputs: the bundled ``seed_block_annotated`` recording and
``--recorded NAME`` (``.bench-data/NAME.json.gz`` with its annotations, recorded on the GPU
machine; not in the repository). Medians of the seconds; outputs compared byte for byte.
"""
from __future__ import annotations

import argparse
import gzip
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from template_runs_ab import machine_line  # noqa: E402

from perfetto_graph_ann._resources import demo_data_dir  # noqa: E402

_PB2 = "from perfetto.protos.perfetto.trace import perfetto_trace_pb2\n"
ARMS = {"protos classes first": _PB2, "as shipped": ""}

_CHILD = """
import sys, time, hashlib
{torch}from perfetto_graph_ann.annotations.files import load_annotations
src, ann, out = sys.argv[1:4]
annotations = load_annotations(ann)
t = time.perf_counter()
{prelude}from perfetto_graph_ann.pipeline.convert import write_joined_file
write_joined_file(src, out, annotations, "all", label="torch.profiler trace")
first = time.perf_counter() - t
digest = hashlib.sha256(open(out, "rb").read()).hexdigest()
t = time.perf_counter()
write_joined_file(src, out, annotations, "all", label="torch.profiler trace")
print(first, time.perf_counter() - t, digest, "perfetto.protos.perfetto.trace.perfetto_trace_pb2" in sys.modules)
"""


def _inputs(names, tmp: str):
    data = demo_data_dir()
    src = os.path.join(tmp, "seed_block_annotated.json")
    Path(src).write_bytes(gzip.decompress((data / "seed_block_annotated.trace.json.gz").read_bytes()))
    yield "bundled seed_block_annotated", src, str(data / "seed_block_annotated.capture.json")
    for name in names:
        src = os.path.join(tmp, f"{name}.json")
        Path(src).write_bytes(gzip.decompress((ROOT / ".bench-data" / f"{name}.json.gz").read_bytes()))
        yield f"recorded {name}", src, str(ROOT / ".bench-data" / f"{name}.annotations.json")


def _run(prelude: str, torch: bool, src: str, ann: str, out: str) -> tuple:
    script = _CHILD.format(torch="import torch\n" if torch else "", prelude=prelude)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-c", script, src, ann, out], env=env, capture_output=True, text=True,
                         check=True)
    first, later, digest, pb2 = res.stdout.split()[-4:]
    return float(first), float(later), digest, pb2 == "True"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recorded", nargs="*", default=["t1", "t7"])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--no-torch", action="store_true", help="do not import torch first")
    args = ap.parse_args()
    torch = not args.no_torch and importlib.util.find_spec("torch") is not None
    print(machine_line() + f"; torch imported first: {'yes' if torch else 'no'}")
    names = list(ARMS)
    print(f"| input | {names[0]}: first export s | {names[1]}: first export s | ratio | later export s "
          f"| `perfetto_trace_pb2` imported as shipped | same bytes |")
    print("| --- | ---: | ---: | ---: | ---: | --- | --- |")
    with tempfile.TemporaryDirectory(prefix="pga-first-export-") as tmp:
        for label, src, ann in _inputs(args.recorded, tmp):
            got: dict = {n: [] for n in names}
            for r in range(args.rounds):
                for n in (names if r % 2 == 0 else names[::-1]):
                    got[n].append(_run(ARMS[n], torch, src, ann, os.path.join(tmp, "out.pftrace")))
            first = [statistics.median(g[0] for g in got[n]) for n in names]
            later = statistics.median(g[1] for n in names for g in got[n])
            same = len({g[2] for n in names for g in got[n]}) == 1
            loaded = "yes" if any(g[3] for g in got[names[1]]) else "no"
            print(f"| {label} | {first[0]:.3f} | {first[1]:.3f} | {first[1] / first[0]:.2f}x | {later:.3f} | "
                  f"{loaded} | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
