"""Benchmark: the wall time and peak memory of ``perfetto-graph-ann convert`` as a command, in
fresh processes (the interpreter's start, the imports and the work), on small traces, where the
start is most of it.

    python benchmarks/cli_convert_wall.py [--recorded T1 T7] [--rounds 7]

Arms, alternating, each a fresh ``python -c`` running ``cli.main.main(["convert", TRACE, "-o",
OUT, "--annotations", ANN, "-q"])``: ``pandas first`` (pandas imported before the command, as
``join.summary`` imported it at its top until session 34: every joining command paid it) and
``as shipped``. Inputs: the bundled ``seed_block_annotated`` recording and ``--recorded NAME``
(``.bench-data/NAME.json.gz`` with its annotations, recorded on the GPU machine; not in the
repository). Medians of the wall seconds and of the peak RSS (``/proc/self/status`` VmHWM).
"""
from __future__ import annotations

import argparse
import gzip
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from proc import HWM_PRELUDE  # noqa: E402
from template_runs_ab import machine_line  # noqa: E402

from perfetto_graph_ann._resources import demo_data_dir  # noqa: E402

ARMS = {"pandas first": "import pandas\n", "as shipped": ""}


def _inputs(names, tmp: str):
    data = demo_data_dir()
    yield ("bundled seed_block_annotated", str(data / "seed_block_annotated.trace.json.gz"),
           str(data / "seed_block_annotated.capture.json"))
    for name in names:
        src = os.path.join(tmp, f"{name}.json")
        Path(src).write_bytes(gzip.decompress((ROOT / ".bench-data" / f"{name}.json.gz").read_bytes()))
        yield f"recorded {name}", src, str(ROOT / ".bench-data" / f"{name}.annotations.json")


def _run(prelude: str, src: str, ann: str, out: str) -> tuple:
    script = (HWM_PRELUDE + prelude + "from perfetto_graph_ann.cli.main import main\n"
              f"assert main(['convert', {src!r}, '-o', {out!r}, '--annotations', {ann!r}, '-q']) == 0\n"
              "print(hwm())\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    return time.perf_counter() - t, int(res.stdout.split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recorded", nargs="*", default=["t1", "t7"])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    print(machine_line())
    names = list(ARMS)
    print(f"| input | {names[0]} s | {names[1]} s | ratio | {names[0]} MB | {names[1]} MB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory(prefix="pga-cli-wall-") as tmp:
        for label, src, ann in _inputs(args.recorded, tmp):
            got: dict = {n: [] for n in names}
            for r in range(args.rounds):
                for n in (names if r % 2 == 0 else names[::-1]):
                    got[n].append(_run(ARMS[n], src, ann, os.path.join(tmp, "out.pftrace")))
            wall = [statistics.median(t for t, _ in got[n]) for n in names]
            mb = [statistics.median(m for _, m in got[n]) / 1e6 for n in names]
            print(f"| {label} | {wall[0]:.3f} | {wall[1]:.3f} | {wall[1] / wall[0]:.2f}x | {mb[0]:.0f} | {mb[1]:.0f} |")


if __name__ == "__main__":
    main()
