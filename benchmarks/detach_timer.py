"""Benchmark (issue 31): what a capture's end pays to schedule the CUPTI detach.

    python benchmarks/detach_timer.py [--captures 300] [--rounds 7]

Each capture of an instrumented process ends with two calls of ``NodeWatch.idle`` (the node
table read, then the capture's hold released), each asking for the detach ``delay`` after the
last use (``PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS``, 1 s by default on CUDA 13 drivers). Arms,
alternating, on a ``NodeWatch`` of its own (fake detach functions: the timer never detaches,
its delay is 60 s): ``new timer each time`` (a ``threading.Timer`` started at every call, as
until session 35) and ``as shipped`` (a pending timer that fires no later than asked is
kept). Microseconds a capture's end (the two calls), medians over rounds of ``--captures``
capture ends each, and the timer threads each arm started in all; no GPU needed.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from template_runs_ab import machine_line  # noqa: E402

from perfetto_graph_ann.capture import nodewatch  # noqa: E402


def _restarting(watch: nodewatch.NodeWatch) -> None:
    """The watch as it was: every call starts a new timer thread."""
    def start_timer(delay: float) -> None:
        watch._delay = delay
        watch._arm(delay)

    watch._start_timer = start_timer


def _counting(watch: nodewatch.NodeWatch, counts: dict, name: str) -> None:
    """Count the timer threads ``watch`` starts (each ``_arm`` is one) under ``counts[name]``."""
    arm = watch._arm

    def counted(seconds: float) -> None:
        counts[name] += 1
        arm(seconds)

    watch._arm = counted


def _capture_ends(watch: nodewatch.NodeWatch, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        watch.idle((1, 2, 3, 4, 5))  # finish_capture: the backend's detach functions
        watch.unhold()  # the capture's hold released
    return (time.perf_counter() - t) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--captures", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    os.environ["PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS"] = "60000"
    print(machine_line())
    arms = {"new timer each time": nodewatch.NodeWatch(), "as shipped": nodewatch.NodeWatch()}
    _restarting(arms["new timer each time"])
    got: dict = {k: [] for k in arms}
    threads = dict.fromkeys(arms, 0)
    for name, watch in arms.items():
        _counting(watch, threads, name)
    try:
        for r in range(args.rounds):
            for name in (list(arms) if r % 2 == 0 else list(arms)[::-1]):
                watch = arms[name]
                watch.hold()
                got[name].append(_capture_ends(watch, args.captures))
    finally:
        for watch in arms.values():
            watch.close()
    med = {k: statistics.median(v) * 1e6 for k, v in got.items()}
    print("| arm | us a capture's end (two calls) | best us | timer threads started |")
    print("| --- | ---: | ---: | ---: |")
    for k, v in got.items():
        print(f"| {k} | {med[k]:.1f} | {min(v) * 1e6:.1f} | {threads[k]} |")
    print(f"| as shipped / new timer each time | {med['as shipped'] / med['new timer each time']:.3f}x | | |")


if __name__ == "__main__":
    main()
