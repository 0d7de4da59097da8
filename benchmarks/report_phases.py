"""Benchmark (issue 33): where ``report``'s time goes on a ``.pftrace``, in one engine session.

    python benchmarks/report_phases.py TRACE.pftrace [--engine portable|native] [--full]

Wall and engine CPU seconds (the engine process's user + system time, from /proc: steadier
than wall time on a busy machine) of: the load; each SQL module the default report (the
summary) includes, in dependency order (each what it adds to the ones before); the summary's
queries (a ``COUNT`` / ``SUM`` row and the first rows of each section, the replays', collectives'
and idle gaps' through ``metrics.summary_rows``' shortcuts); formatting the summary. With
``--full`` also the modules only ``--all`` and ``--format csv / json`` include, and reading
every full table into pandas. Build a 1M-kernel trace with
``python benchmarks/sql.py --kernels 1000000 --prepare PATH``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from proc import cpu_seconds  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--engine", default="portable")
    ap.add_argument("--full", action="store_true", help="also the full tables' modules and reading them")
    args = ap.parse_args()
    from perfetto_graph_ann.cli.report import SECTIONS, _summary_keys, _summary_modules, format_summary, summarize
    from perfetto_graph_ann.query import metrics
    from perfetto_graph_ann.query.includes import in_dependency_order
    from perfetto_graph_ann.query.session import open_trace

    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    t0 = time.perf_counter()
    pid = None
    c0 = 0.0  # the engine process starts with the session: its CPU time so far is the load's
    total = {"wall": 0.0, "cpu": 0.0}

    def lap(what: str) -> None:
        nonlocal t0, c0
        t = time.perf_counter()
        c = cpu_seconds(pid) if pid else float("nan")
        total["wall"] += t - t0
        total["cpu"] += c - c0
        print(f"{what}: {t - t0:.2f} s wall, {c - c0:.2f} s engine CPU", flush=True)
        t0, c0 = t, c

    with open_trace(args.trace, engine=args.engine) as s:
        pid = s.engine.pid
        lap("load (engine start included)")
        done = []
        for m in in_dependency_order(_summary_modules(_summary_keys(False, False))):
            s.query(f"INCLUDE PERFETTO MODULE {m};")
            done.append(m)
            lap(m)
        parts = summarize(s, None, 5)
        lap("summary queries")
        format_summary(parts)
        lap("summary formatting")
        print(f"default report in all: {total['wall']:.2f} s wall, {total['cpu']:.2f} s engine CPU "
              f"(load average now {os.getloadavg()[0]:.2f})", flush=True)
        if args.full:
            full = [metrics.METRICS[k].module for k in SECTIONS if k in metrics.METRICS]
            for m in in_dependency_order(full):
                if m not in done:
                    s.query(f"INCLUDE PERFETTO MODULE {m};")
                    lap(f"{m} (--all, csv, json only)")
            metrics.report(s)
            lap("full tables (--all, csv, json)")


if __name__ == "__main__":
    main()
