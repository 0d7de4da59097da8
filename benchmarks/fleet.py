"""Fleet benchmark: ``fleet_report`` over many ranks' traces, locally (threads) and on a
local Ray instance, with 1 and 2 workers.

    python benchmarks/fleet.py [--ranks 64] [--events 100000] [--configs local1,local2,ray1,ray2]

One synthetic torch.profiler trace of ``--events`` events (``benchmarks/synth.py``: the
eager all_reduce recording's pattern repeated, NCCL kernels with their collective fields)
is written once; every rank gets a copy with its own ``distributedInfo.rank`` and, for the
last rank, a ``baseTimeNanoseconds`` 1 ms later (the straggler the report must name).
Each configuration runs the whole report (convert JSON -> .pftrace on the worker, load in
a portable engine, the lanes / collectives / clock queries, the pandas combination); Ray's
start-up is timed apart (a cluster normally runs already). Prints a Markdown section for
BENCHMARKS.md.
"""
from __future__ import annotations

import argparse
import datetime
import gzip
import os
import platform
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synth import dumps, make_trace  # noqa: E402

import perfetto_graph_ann as pga  # noqa: E402
from perfetto_graph_ann.query.engine import EngineConfig  # noqa: E402

DELAY_NS = 1_000_000


def write_fleet(folder: Path, ranks: int, events: int) -> int:
    """Write the ranks' traces; returns the events per trace."""
    trace = make_trace(events, fixtures=("allreduce_eager_rank0",))
    n = len(trace["traceEvents"])
    text = dumps(trace).decode()
    head, body = text.split('"traceEvents"', 1)
    base = int(re.search(r'"baseTimeNanoseconds": (\d+)', head).group(1))
    for r in range(ranks):
        h = re.sub(r'"rank": \d+', f'"rank": {r}', head, count=1)
        h = h.replace(f'"baseTimeNanoseconds": {base}',
                      f'"baseTimeNanoseconds": {base + (DELAY_NS if r == ranks - 1 else 0)}')
        with gzip.open(folder / f"rank{r}.trace.json.gz", "wt", compresslevel=1) as f:
            f.write(h + '"traceEvents"' + body)
    return n


def run(config: str, folder: Path, ranks: int) -> dict:
    engine = EngineConfig(engine="portable")
    workers = int(config[-1])
    init_s = 0.0
    ray_tmp = None
    if config.startswith("ray"):
        import ray

        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        ray_tmp = tempfile.mkdtemp(prefix="pga-bench-ray-")
        t = time.perf_counter()
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, object_store_memory=256 << 20,
                 _temp_dir=ray_tmp, _node_ip_address="127.0.0.1")
        init_s = time.perf_counter() - t
    try:
        t = time.perf_counter()
        report = pga.fleet_report([folder], executor="ray" if config.startswith("ray") else "local",
                                  config=engine, max_workers=workers, progress=False)
        wall = time.perf_counter() - t
    finally:
        if ray_tmp is not None:
            ray.shutdown()
            shutil.rmtree(ray_tmp, ignore_errors=True)
    top = report.ranking.iloc[0]
    assert top["rank"] == ranks - 1, report.ranking.head()
    return {"config": config, "wall_s": wall, "init_s": init_s, "per_rank_s": wall / ranks,
            "straggler": int(top["rank"]), "median_lateness_us": top["median_lateness_ns"] / 1000,
            "instances": int(report.collectives["blamed"].sum())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--configs", default="local1,local2,ray1,ray2")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pga-bench-fleet-") as tmp:
        folder = Path(tmp)
        t = time.perf_counter()
        n = write_fleet(folder, args.ranks, args.events)
        gen = time.perf_counter() - t
        rows = [run(c, folder, args.ranks) for c in args.configs.split(",")]
    print(f"### fleet_report: {args.ranks} ranks x {n:,} events "
          f"({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)\n")
    print(f"{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}, portable engine; "
          f"traces written in {gen:.1f} s\n")
    print("| config | wall (s) | per rank (s) | vs local1 | Ray start (s) | straggler named | its median lateness (µs) | instances |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    ref = rows[0]["wall_s"]
    for r in rows:
        print(f"| {r['config']} | {r['wall_s']:.1f} | {r['per_rank_s']:.2f} | {ref / r['wall_s']:.2f}x | "
              f"{r['init_s']:.1f} | {r['straggler']} | {r['median_lateness_us']:.1f} | {r['instances']} |")


if __name__ == "__main__":
    main()
