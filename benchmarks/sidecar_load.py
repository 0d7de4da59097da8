"""Benchmark (issue 33): loading a binary sidecar, as a background export's worker does every
profiling cycle (and ``convert --annotations``, ``merge`` and ``fleet`` once a file).

    python benchmarks/sidecar_load.py [--recorded T7 HF20] [--layers 36] [--graphs 32] [--rounds 9] [--json]

Each input is saved once (binary; ``--json``: a JSON sidecar, ``.annotations.json``, as
``pga.save_annotations("run.annotations.json")`` writes it), then ``load_annotations`` timed
``--rounds`` times; medians in milliseconds, and microseconds a node. Inputs as ``sidecar_save_ab.py``'s. To compare
revisions, run it in each (a worktree of the other, this file copied there).
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from sidecar_save_ab import _inputs, input_args  # noqa: E402

from perfetto_graph_ann.annotations.files import load_annotations, save_annotations  # noqa: E402


def main() -> None:
    args = input_args(__doc__, [36], 9, json=True)
    form, suffix = ("json", ".annotations.json") if args.json else ("binary", ".pgab")
    print(f"| annotations ({form}) | nodes | load ms | us a node |")
    print("| --- | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory(prefix="pga-sidecar-load-") as tmp:
        for k, (label, ann) in enumerate(_inputs(args)):
            path = save_annotations(os.path.join(tmp, f"{k}{suffix}"), ann, form)
            times = []
            for _ in range(args.rounds):
                t = time.perf_counter()
                back = load_annotations(path)
                times.append(time.perf_counter() - t)
            if back.graphs != ann.graphs:
                sys.exit(f"{label}: the loaded graphs differ from the saved ones")
            nodes = sum(len(g.nodes) for g in ann.graphs)
            ms = statistics.median(times) * 1e3
            print(f"| {label} | {nodes:,} | {ms:.1f} | {ms * 1e3 / nodes:.2f} |")


if __name__ == "__main__":
    main()
