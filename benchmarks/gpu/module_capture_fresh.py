"""Capture cost of zero-code instrumentation in fresh processes, arms alternating (issue 31's
"plain / instrumented / instrumented with modules, fresh processes alternating").

Each process runs one arm of ``module_capture.py --arm`` (the 36-layer module decoder, batch 16,
the instrumentation installed before the model is built) and captures it ``--captures`` times
into one pool; the processes of a round run the three arms one after another, in an order that
alternates between rounds. Reported per arm: the median of each process's first capture, of
its later ones and of all its captures together, and their ratios to the plain arm's of the
same round (medians over rounds, with a 95% bootstrap interval of the median ratio).
``modules_cold``: module scopes with CUPTI initialised by the first capture
(``PERFETTO_GRAPH_ANN_WARM_CUPTI=0``: the code before session 16); ``plain_cupti``: a plain
process that initialises CUPTI as the warm-up does (what CUPTI alone costs its captures);
``--batches``: one graph per batch size into one pool, as a serving runner captures.

``parts_ms_per_capture``: each capture's begin (``torch.cuda.graph``'s entry), body (the
forward) and end (its exit and a synchronize). ``first_unnamed`` and ``process_total_unnamed``:
the same less what naming the roots took (timed inside each process: ``modules.model_of``, the
collector's scans of ``owners``, and the model's ``named_modules``; the first capture pays it,
once per root). ``later_cpu``, ``process_total_cpu`` (``_unnamed``: less the naming's wall time):
the same from the capturing thread's CPU time, entry to exit (``module_capture.capture_once``):
on a host whose plain processes took 104-209 ms for the same seven captures (session 38), time
other processes took from the capture is in the wall times and not in these. ``--model hf-llama``:
transformers' ``LlamaForCausalLM`` (``module_capture.py``), a process with transformers' objects
too.

    python benchmarks/gpu/module_capture_fresh.py --rounds 20 [--captures 4 | --batches 16 8 4 2 1]
        [--arms plain modules ...] [--model toy|hf-llama] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ARMS = ("plain", "instrumented", "modules", "modules_cold")


def run_arm(arm: str, captures: int, batches: list = None, model: str = "toy") -> dict:
    extra = ["--batches", *map(str, batches)] if batches else []
    cp = subprocess.run([sys.executable, os.path.join(HERE, "module_capture.py"), "--arm", arm, "--model", model,
                         "--captures", str(captures), *extra], capture_output=True, text=True, timeout=300)
    if cp.returncode != 0:
        raise SystemExit(f"{arm}: exit {cp.returncode}\n{cp.stderr[-2000:]}")
    return json.loads(cp.stdout.strip().splitlines()[-1])


def interval(ratios: list, n: int = 2000) -> list:
    """95% bootstrap interval of the median of ``ratios``."""
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(n))
    return [round(meds[int(0.025 * n)], 4), round(meds[int(0.975 * n) - 1], 4)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--captures", type=int, default=4)
    ap.add_argument("--batches", type=int, nargs="+", help="one graph per batch size, in this order")
    ap.add_argument("--arms", nargs="+", default=list(ARMS),
                    help="arms to run (plain first; also plain_cupti, instrumented_cold)")
    ap.add_argument("--model", choices=("toy", "hf-llama"), default="toy",
                    help="hf-llama: transformers' LlamaForCausalLM (needs transformers)")
    ap.add_argument("--out", help="also write the report (raw times included) to this JSON file")
    args = ap.parse_args()
    arms = tuple(["plain"] + [a for a in args.arms if a != "plain"])
    got = {a: [] for a in arms}
    cpu_of = {a: [] for a in arms}
    naming = {a: [] for a in arms}
    parts_of = {a: [] for a in arms}
    warmed = {a: [] for a in arms}
    objects = {a: [] for a in arms}
    for r in range(args.rounds):
        for arm in (arms if r % 2 == 0 else arms[::-1]):
            one = run_arm(arm, args.captures, args.batches, args.model)
            got[arm].append(one["capture_ms"])
            cpu_of[arm].append(one["capture_cpu_ms"])
            naming[arm].append(one["root_naming_ms"])
            parts_of[arm].append(one["parts_ms"])
            warmed[arm].append(one.get("cupti_warmed"))
            objects[arm].append(one["gc_objects"])
    med = statistics.median
    parts = {"first": {a: [t[0] for t in v] for a, v in got.items()},
             "later": {a: [med(t[1:]) for t in v] for a, v in got.items()},
             "process_total": {a: [sum(t) for t in v] for a, v in got.items()},
             # the same less what the roots' naming took (modules.model_of and add_root, timed inside)
             "first_unnamed": {a: [t[0] - n[0] for t, n in zip(v, naming[a])] for a, v in got.items()},
             "process_total_unnamed": {a: [sum(t) - sum(n) for t, n in zip(v, naming[a])] for a, v in got.items()},
             # the capturing thread's CPU time: what other processes took from it is not in it
             "later_cpu": {a: [med(t[1:]) for t in v] for a, v in cpu_of.items()},
             "process_total_cpu": {a: [sum(t) for t in v] for a, v in cpu_of.items()},
             "process_total_cpu_unnamed": {a: [sum(t) - sum(n) for t, n in zip(v, naming[a])]
                                           for a, v in cpu_of.items()}}
    rep = {"model": args.model, "rounds": args.rounds, "captures_per_process": len(args.batches or []) or args.captures,
           "batches": args.batches}
    for part, by_arm in parts.items():
        rep[f"{part}_ms"] = {a: round(med(v), 3) for a, v in by_arm.items()}
        ratios = {a: [x / p for x, p in zip(by_arm[a], by_arm["plain"])] for a in arms[1:]}
        rep[f"{part}_ratio"] = {a: round(med(v), 4) for a, v in ratios.items()}
        rep[f"{part}_ratio_95"] = {a: interval(v) for a, v in ratios.items()}
    n = len(got["plain"][0])
    rep["per_capture_ratio"] = {a: [round(med([t[i] / p[i] for t, p in zip(got[a], got["plain"])]), 4) for i in range(n)]
                                for a in arms[1:]}
    rep["root_naming_ms_per_capture"] = {a: [round(med([nm[i] for nm in v]), 3) for i in range(n)]
                                         for a, v in naming.items()}
    # each capture's begin / body / end (ms), medians over the arm's processes
    rep["parts_ms_per_capture"] = {a: [[round(med([p[i][k] for p in v]), 3) for k in range(3)] for i in range(n)]
                                   for a, v in parts_of.items()}
    rep["gc_objects_median"] = {a: med(v) for a, v in objects.items()}
    rep["cupti_warmed"] = {a: sum(bool(w) for w in v) for a, v in warmed.items()}
    rep["raw_ms"] = got
    rep["raw_cpu_ms"] = cpu_of
    print(json.dumps({k: v for k, v in rep.items() if not k.startswith("raw_")}, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rep, f, indent=1)


if __name__ == "__main__":
    main()
