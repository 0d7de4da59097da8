"""Benchmark (issue 33): what the join derives from a graph record alone, built once per record
(``GraphRecord.derived``) against built again for every export, on what ``pga.export`` runs
after torch's JSON.

    python benchmarks/graph_derived_ab.py [--recorded T1 T7 HF20] [--synthetic 828x1 828x7 1656x20] [--graphs 32]
                                          [--rounds 9]

``trace_handler`` exports each profiling cycle against the same graph records: their loose
node counts (the replay fit), calibration table, scopes (the projection) and the predecessors
on their edges (the critical path) hold for every cycle. Arms, alternating each round after
one untimed write (``template_runs_ab.compare_arms``): ``fresh`` (every record's derived values
dropped before the write: what the first export of a process pays, and every export paid
before) and ``kept`` (as a later export runs). Inputs as ``template_runs_ab.py``'s, and each
recorded one again with ``--graphs`` graphs in its annotations (``decoder_synth.with_batch_sizes``:
a serving engine's graph per batch size; 0 or 1: not).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from decoder_synth import with_batch_sizes  # noqa: E402
from template_runs_ab import _inputs, compare_arms, machine_line  # noqa: E402


def _with_graphs(args, tmp: str):
    """The inputs of ``template_runs_ab``, then each recorded one with ``args.graphs`` graphs."""
    seen = []
    for label, src, ann in _inputs(args, tmp):
        yield label, src, ann
        if label.startswith("recorded "):
            seen.append((label, src, ann))
    if args.graphs > 1:
        for label, src, ann in seen:
            yield f"{label}, {args.graphs} graphs", src, with_batch_sizes(ann, args.graphs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recorded", nargs="*", default=["t1", "t7", "hf20"])
    ap.add_argument("--synthetic", nargs="*", default=["828x1", "828x7", "1656x20"])
    ap.add_argument("--graphs", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    print(machine_line())

    def arm(name: str, ann) -> None:
        if name == "fresh":
            for g in ann.graphs:
                g.__dict__.pop("_derived", None)

    compare_arms(args, ("fresh", "kept"), arm, "pga-graph-derived-", _with_graphs)
    print(f"load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
