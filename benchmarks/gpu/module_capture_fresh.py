"""Capture cost of zero-code instrumentation in fresh processes, arms alternating (issue 31's
"plain / instrumented / instrumented with modules, fresh processes alternating").

Each process runs one arm of ``module_capture.py --arm`` (the 36-layer module decoder, batch 16,
the instrumentation installed before the model is built) and captures it ``--captures`` times
into one pool; the processes of a round run the three arms one after another, in an order that
alternates between rounds. Reported per arm: the median of each process's first capture and of
its later ones, and their ratios to the plain arm's of the same round (medians over rounds).

    python benchmarks/gpu/module_capture_fresh.py --rounds 6 [--captures 4]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ARMS = ("plain", "instrumented", "modules")


def run_arm(arm: str, captures: int) -> list:
    cp = subprocess.run([sys.executable, os.path.join(HERE, "module_capture.py"), "--arm", arm,
                         "--captures", str(captures)], capture_output=True, text=True, timeout=300)
    if cp.returncode != 0:
        raise SystemExit(f"{arm}: exit {cp.returncode}\n{cp.stderr[-2000:]}")
    return json.loads(cp.stdout.strip().splitlines()[-1])["capture_ms"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--captures", type=int, default=4)
    args = ap.parse_args()
    got = {a: [] for a in ARMS}
    for r in range(args.rounds):
        for arm in (ARMS if r % 2 == 0 else ARMS[::-1]):
            got[arm].append(run_arm(arm, args.captures))
    med = statistics.median
    first = {a: [t[0] for t in v] for a, v in got.items()}
    later = {a: [med(t[1:]) for t in v] for a, v in got.items()}
    rep = {"rounds": args.rounds, "captures_per_process": args.captures,
           "first_capture_ms": {a: round(med(v), 3) for a, v in first.items()},
           "later_captures_ms": {a: round(med(v), 3) for a, v in later.items()},
           "first_ratio": {a: round(med(x / p for x, p in zip(first[a], first["plain"])), 4) for a in ARMS[1:]},
           "later_ratio": {a: round(med(x / p for x, p in zip(later[a], later["plain"])), 4) for a in ARMS[1:]},
           "raw_ms": got}
    print(json.dumps(rep, indent=1))


if __name__ == "__main__":
    main()
