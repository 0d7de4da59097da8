"""Benchmark (issue 33): ``perfetto-graph-ann report`` of one trace, this checkout against another,
alternating in one run.

    python benchmarks/report_ab.py TRACE.pftrace --base DIR [--rounds 3] [-- REPORT ARGS...]

DIR is another checkout of the project (e.g. ``git worktree add DIR <commit>``, or a ``git
archive`` of it). Each round runs the CLI once with ``PYTHONPATH=DIR`` and once with this
checkout (order swapped every round), each a fresh process on the portable engine, and prints
per run the wall seconds, the CPU seconds of the CLI and everything it waited for (the Node
engine included: ``RUSAGE_CHILDREN``), the 1-minute load average when it started and the
printed lines; the outputs of both arms must be byte-identical. Build a 1M-kernel trace with
``python benchmarks/sql.py --kernels 1000000 --prepare PATH``.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_once(checkout: Path, trace: str, extra: list, out: Path) -> dict:
    """One ``report`` run: wall and CPU seconds, load average at its start, lines printed."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    cmd = [sys.executable, "-m", "perfetto_graph_ann", "report", trace, "--engine", "portable", "-q", "-o", str(out),
           *extra]
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, cwd=checkout)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, "load": load, "lines": len(out.read_text().splitlines())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--base", type=Path, required=True, help="the other checkout")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("extra", nargs="*", help="more report arguments (after --)")
    args = ap.parse_args()
    arms = {"base": args.base.resolve(), "new": ROOT}
    runs = {k: [] for k in arms}
    with tempfile.TemporaryDirectory(prefix="report-ab-") as tmp:
        for r in range(args.rounds):
            order = list(arms) if r % 2 == 0 else list(reversed(arms))
            outs = {}
            for arm in order:
                outs[arm] = Path(tmp) / f"{arm}.txt"
                res = run_once(arms[arm], args.trace, args.extra, outs[arm])
                runs[arm].append(res)
                print(f"round {r + 1} {arm:4s}: wall {res['wall']:6.2f} s  cpu {res['cpu']:6.2f} s  "
                      f"load {res['load']:4.2f}  lines {res['lines']}", flush=True)
            same = outs["base"].read_bytes() == outs["new"].read_bytes()
            print(f"round {r + 1}: outputs {'identical' if same else 'DIFFER'}", flush=True)
            if not same:
                sys.exit(1)
    for key in ("wall", "cpu"):
        b = statistics.median(x[key] for x in runs["base"])
        n = statistics.median(x[key] for x in runs["new"])
        print(f"median {key}: base {b:.2f} s, new {n:.2f} s, new / base {n / b:.3f}")


if __name__ == "__main__":
    main()
