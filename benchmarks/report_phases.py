"""Benchmark (issue 33): where ``report``'s time goes on a ``.pftrace``, in one engine session.

    python benchmarks/report_phases.py TRACE.pftrace [--engine portable|native]

Wall seconds of: the load; each SQL module the report includes, in dependency order (each
what it adds to the ones before); the summary's queries (``report``'s default table view:
a ``COUNT`` / ``SUM`` row and the first rows of each section); formatting the summary; and
reading every full table into pandas (what ``--all`` and ``--format csv / json`` read).
Build a 1M-kernel trace with ``python benchmarks/sql.py --kernels 1000000 --prepare PATH``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--engine", default="portable")
    args = ap.parse_args()
    from perfetto_graph_ann.cli.report import _METRIC, SECTIONS, format_summary, summarize
    from perfetto_graph_ann.query import metrics
    from perfetto_graph_ann.query.includes import in_dependency_order
    from perfetto_graph_ann.query.session import open_trace

    t0 = time.perf_counter()

    def lap(what: str) -> None:
        nonlocal t0
        t = time.perf_counter()
        print(f"{what}: {t - t0:.2f} s", flush=True)
        t0 = t

    with open_trace(args.trace, engine=args.engine) as s:
        lap("load")
        modules = [metrics.METRICS[_METRIC[k]].module for k in SECTIONS if k != "modules"]
        for m in in_dependency_order(modules):
            s.query(f"INCLUDE PERFETTO MODULE {m};")
            lap(m)
        parts = summarize(s, None, 5)
        lap("summary queries")
        format_summary(parts)
        lap("summary formatting")
        metrics.report(s)
        lap("full tables (--all, csv, json)")


if __name__ == "__main__":
    main()
