"""Benchmark: time of each graph_ann SQL module on a synthetic trace with 1M GPU kernels.

    python benchmarks/sql.py [--kernels 1000000] [--engine portable|native|both]
    python benchmarks/sql.py --kernels 1000000 --prepare /tmp/sql1m.pftrace   # build once
    python benchmarks/sql.py --trace /tmp/sql1m.pftrace [--statements]         # reuse it

The trace: CUDA graph replays of a 20-node graph (17 compute kernels on two hardware
streams, one NCCL all-reduce with eager-style collective args, one memcpy, one memset),
each replay launched by a ``cudaGraphLaunch``; a join-like LaneLayout moves the nodes to
four annotated lanes (``60 default_pg (allreduce)``, ``61 mlp``, ``62 attention``, lane
7), gathering both hardware streams into lane 61 so kernels overlap there. It is built in
memory as a :class:`~perfetto_graph_ann.read.model.KinetoTrace` and written with
``convert`` (the converter's time is printed too, for reference).

Each module is timed as ``INCLUDE PERFETTO MODULE graph_ann.<m>`` in one session, in
dependency order (read from the modules' own ``INCLUDE`` lines, so ``--sql-dir`` may hold
another set of modules), so each time is what that module adds on top of the ones before
it; "cold" is the module on a fresh session with its dependencies (sum of its own and its
dependencies' times, private helper modules included). That sum leaves out what the first
query of a session pays once (~0.1 s at 1M kernels, whichever module comes first), so
``--fresh`` also times every module alone on a fresh session of its own: the number a user
who loads only that module sees. Besides wall time it
reports the engine process's CPU time (user + system, all threads, from /proc), which a
busy machine inflates much less. Targets (issue 6): 2 s per module on the portable
engine, 0.5 s native.

``--statements`` also times every statement of every module on its own (the module's
dependencies included first, then its statements run one by one), to find where a
module's time goes.
"""
from __future__ import annotations

import argparse
import os
import platform
import random
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfetto_graph_ann.join.model import LaneLayout, Placement  # noqa: E402
from proc import cpu_seconds  # noqa: E402
from perfetto_graph_ann.query.engine import EngineConfig  # noqa: E402
from perfetto_graph_ann.query.session import open_trace  # noqa: E402
from perfetto_graph_ann.read.model import KinetoTrace, TraceEvent  # noqa: E402
from perfetto_graph_ann.pipeline.convert import ConvertConfig, convert  # noqa: E402

SQL_DIR = ROOT / "sql" / "graph_ann"
NODES = 20
NCCL_ARGS = {"Collective name": "allreduce", "In msg nelems": 1 << 20, "Out msg nelems": 1 << 20, "Group size": 8,
             "dtype": "BFloat16", "Process Group Name": "0", "Process Group Description": "default_pg",
             "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]"}


def build(kernels: int, seed: int = 1):
    """A KinetoTrace with about ``kernels`` GPU work events, and its LaneLayout."""
    rng = random.Random(seed)
    events = []
    placements = {}
    # one shared Placement per node: lane and annotation as the join would give them
    node_place = []
    for n in range(NODES):
        if n == 0:
            node_place.append(Placement(60, dict(NCCL_ARGS, name="allreduce", original_stream=30, join="exact")))
        elif n < 9:
            node_place.append(Placement(61, {"name": "mlp", "original_stream": 7 + 13 * (n % 2), "join": "exact"}))
        elif n < 16:
            node_place.append(Placement(62, {"name": "attention", "original_stream": 7, "join": "exact"}))
        else:
            node_place.append(Placement(7, {"original_stream": 7, "join": "exact"}))
    t = 1_000_000_000
    corr = 1
    cpu_pid = cpu_tid = 900
    while len(placements) < kernels:
        events.append(TraceEvent(len(events), "X", "cuda_runtime", "cudaGraphLaunch", cpu_pid, cpu_tid, t - 20_000,
                                 8_000, {"correlation": corr}))
        cursor = {7: t, 20: t + rng.randint(0, 2_000), 30: t + 5_000}
        for n in range(NODES):
            stream = 30 if n == 0 else (7 + 13 * (n % 2) if n < 9 else 7)
            cat, name = "kernel", f"kernel_{n}"
            if n == 0:
                name = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
            elif n == 18:
                cat, name = "gpu_memcpy", "Memcpy DtoD (Device -> Device)"
            elif n == 19:
                cat, name = "gpu_memset", "Memset (Device)"
            dur = rng.randint(1_000, 40_000) if n else rng.randint(30_000, 120_000)
            ts = cursor[stream]
            args = {"device": 0, "stream": stream, "correlation": corr, "graph node id": (5 << 32) | n}
            ev = TraceEvent(len(events), "X", cat, name, 0, stream, ts, dur, args)
            events.append(ev)
            placements[ev.index] = node_place[n]
            cursor[stream] = ts + dur + rng.randint(0, 3_000)
        t = max(cursor.values()) + rng.randint(5_000, 50_000)
        corr += 1
    trace = KinetoTrace(None, events, {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Synthetic GPU"}]})
    names = {(0, 60): "60 default_pg (allreduce)", (0, 61): "61 mlp", (0, 62): "62 attention"}
    return trace, LaneLayout(placements=placements, lane_names=names)


def module_deps(sql_dir: Path) -> Dict[str, Tuple[str, ...]]:
    """Every module of a ``graph_ann`` folder with its dependencies (transitive, from its
    ``INCLUDE PERFETTO MODULE graph_ann.<m>`` lines), in an order where each module comes
    after its dependencies; private helper modules included."""
    direct = {p.stem: re.findall(r"^INCLUDE PERFETTO MODULE graph_ann\.(\w+);", p.read_text(), re.M)
              for p in sorted(sql_dir.glob("*.sql"))}
    out: Dict[str, Tuple[str, ...]] = {}

    def visit(m: str) -> Tuple[str, ...]:
        if m not in out:
            deps: List[str] = []
            for d in direct[m]:
                deps += [x for x in visit(d) + (d,) if x not in deps]
            out[m] = tuple(deps)
        return out[m]

    for m in direct:
        visit(m)
    return out


def time_modules(path: Path, engine: str, sql_dir: Optional[Path] = None) -> dict:
    """Seconds (wall and engine CPU) of each module's INCLUDE, in dependency order, one session.

    ``sql_dir``: a ``graph_ann`` folder to register instead of the package's own (to time
    an older version of the modules against the current one in one run).
    """
    config = EngineConfig(sql_packages=[sql_dir]) if sql_dir else None
    deps = module_deps(sql_dir or SQL_DIR)
    t = time.perf_counter()
    with open_trace(path, engine=engine, config=config) as s:
        res = {"load": time.perf_counter() - t, "version": s.version, "deps": deps}
        pid = s.engine.pid
        for m in deps:
            c = cpu_seconds(pid)
            t = time.perf_counter()
            s.query(f"INCLUDE PERFETTO MODULE graph_ann.{m}")
            res[m] = time.perf_counter() - t
            res[m + "_cpu"] = cpu_seconds(pid) - c
        res["rows"] = s.query("SELECT (SELECT COUNT(*) FROM graph_ann_gpu_work) AS work, "
                              "(SELECT COUNT(*) FROM graph_ann_replay) AS replays").tuples()[0]
    return res


def statements(sql: str) -> list:
    """The statements of a module's text, comments dropped (none of ours has ';' inside)."""
    text = "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
    return [st.strip() for st in text.split(";") if st.strip()]


def time_statements(path: Path, engine: str, sql_dir: Optional[Path] = None) -> None:
    """Per-statement engine CPU and wall time of every module, each on a fresh session."""
    config = EngineConfig(sql_packages=[sql_dir]) if sql_dir else None
    for m in module_deps(sql_dir or SQL_DIR):
        with open_trace(path, engine=engine, config=config) as s:
            pid = s.engine.pid
            for st in statements(((sql_dir or SQL_DIR) / f"{m}.sql").read_text()):
                c, t = cpu_seconds(pid), time.perf_counter()
                s.query(st)
                head = re.sub(r"\s+", " ", st)[:90]
                print(f"{m:12s} {time.perf_counter() - t:7.2f} wall {cpu_seconds(pid) - c:7.2f} cpu  {head}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", type=int, default=1_000_000, help="GPU work events (default 1,000,000)")
    ap.add_argument("--engine", choices=("portable", "native", "both"), default="portable")
    ap.add_argument("--prepare", type=Path, metavar="PATH", help="only build the trace and write it to PATH")
    ap.add_argument("--trace", type=Path, metavar="PATH", help="time this trace (from --prepare) instead of building one")
    ap.add_argument("--statements", action="store_true", help="also time each statement of each module")
    ap.add_argument("--fresh", action="store_true",
                    help="also time each module alone on a fresh session (its true cold time)")
    ap.add_argument("--sql-dir", type=Path, metavar="DIR",
                    help="time this graph_ann folder (e.g. an older version) instead of the package's own")
    ap.add_argument("--before", type=Path, metavar="DIR",
                    help="with --trace: only compare this graph_ann folder against the package's (or "
                         "--sql-dir's), fresh sessions alternating, for --modules")
    ap.add_argument("--modules", default="lane_stats,lane_busy,lanes", help="comma-separated, for --before")
    ap.add_argument("--rounds", type=int, default=2, help="rounds, for --before")
    args = ap.parse_args()
    engines = ("portable", "native") if args.engine == "both" else (args.engine,)
    if args.before:
        if not args.trace:
            ap.error("--before needs --trace")
        for engine in engines:
            compare_fresh(args.trace, engine, args.before, args.sql_dir, args.modules.split(","), args.rounds)
        return
    if args.trace:
        report(args.trace, engines, args.statements, args.sql_dir, args.fresh)
        return
    t = time.perf_counter()
    trace, layout = build(args.kernels)
    print(f"built {len(trace.events):,} events ({len(layout.placements):,} GPU work) in {time.perf_counter() - t:.1f} s")
    with tempfile.TemporaryDirectory(prefix="pga-bench-sql-") as tmp:
        out = args.prepare or Path(tmp) / "synthetic.pftrace"
        t = time.perf_counter()
        convert(trace, out, ConvertConfig(progress=False), layout=layout)
        print(f"converted in {time.perf_counter() - t:.1f} s: {out.stat().st_size / 1e6:.0f} MB")
        del trace, layout
        if not args.prepare:
            report(out, engines, args.statements, args.sql_dir, args.fresh)


def time_fresh(path: Path, engine: str, sql_dir: Optional[Path] = None,
               modules: Optional[List[str]] = None) -> Dict[str, Tuple[float, float]]:
    """(wall, engine CPU) seconds of each module's INCLUDE alone on a fresh session (the
    module and its dependencies, plus what a session's first query pays)."""
    config = EngineConfig(sql_packages=[sql_dir]) if sql_dir else None
    out: Dict[str, Tuple[float, float]] = {}
    for m in modules or module_deps(sql_dir or SQL_DIR):
        with open_trace(path, engine=engine, config=config) as s:
            pid = s.engine.pid
            c, t = cpu_seconds(pid), time.perf_counter()
            s.query(f"INCLUDE PERFETTO MODULE graph_ann.{m}")
            out[m] = (time.perf_counter() - t, cpu_seconds(pid) - c)
    return out


def compare_fresh(path: Path, engine: str, before: Path, after: Optional[Path], modules: List[str],
                  rounds: int) -> None:
    """Fresh-session times of ``modules`` from two graph_ann folders, alternating folder by
    folder within each round (the same machine state for both): a before / after table."""
    rows: Dict[str, Dict[str, List[Tuple[float, float]]]] = {m: {"before": [], "after": []} for m in modules}
    for _ in range(rounds):
        for arm, d in (("before", before), ("after", after)):
            for m, v in time_fresh(path, engine, d, modules).items():
                rows[m][arm].append(v)
    print(f"\nfresh sessions, {rounds} rounds alternating; before: {before}, after: {after or 'the package'}")
    print("| module | before wall s (rounds) | after wall s (rounds) | before CPU s | after CPU s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for m, r in rows.items():
        cells = [" / ".join(f"{v[k]:.2f}" for v in r[arm]) for k in (0, 1) for arm in ("before", "after")]
        print(f"| graph_ann.{m} | {' | '.join(cells)} |")
    print(f"load average after: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")


def report(out: Path, engines, per_statement: bool, sql_dir: Optional[Path] = None, fresh: bool = False) -> None:
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"modules: {sql_dir or 'the package'}")
    for engine in engines:
        r = time_modules(out, engine, sql_dir)
        print(f"\nengine {engine} ({r['version']}): load {r['load']:.1f} s; rows {r['rows']}")
        target = 2.0 if engine == "portable" else 0.5
        print(f"| module | wall s | engine CPU s | cold wall s (with deps) | cold CPU s | target {target} s (cold) |")
        print("| --- | ---: | ---: | ---: | ---: | --- |")
        for m, deps in r["deps"].items():
            cold = r[m] + sum(r[d] for d in deps)
            cold_cpu = r[m + "_cpu"] + sum(r[d + "_cpu"] for d in deps)
            verdict = "met" if cold <= target else ("missed (CPU time within)" if cold_cpu <= target else "missed")
            print(f"| graph_ann.{m} | {r[m]:.2f} | {r[m + '_cpu']:.2f} | {cold:.2f} | {cold_cpu:.2f} | {verdict} |")
        every = sum(r[m] for m in r["deps"]), sum(r[m + "_cpu"] for m in r["deps"])
        print(f"all modules in one session: {every[0]:.2f} s wall, {every[1]:.2f} s engine CPU")
        print(f"load average during the run: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")
        if fresh:
            print(f"\n| module | fresh session wall s | fresh session CPU s | target {target} s |")
            print("| --- | ---: | ---: | --- |")
            for m, (wall, cpu) in time_fresh(out, engine, sql_dir).items():
                print(f"| graph_ann.{m} | {wall:.2f} | {cpu:.2f} | {'met' if cpu <= target else 'missed'} (CPU) |")
            print(f"load average after the fresh sessions: {os.getloadavg()[0]:.1f}")
        if per_statement:
            time_statements(out, engine, sql_dir)


if __name__ == "__main__":
    main()
