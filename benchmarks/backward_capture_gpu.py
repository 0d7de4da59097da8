"""Capture cost of backward tagging on a GPU (run on the GPU machine; needs torch with CUDA).

Moved here from ``tests/gpu/test_backward_truth_gpu.py`` (issue 37: a timing is not a test;
the two cost "tests" asserted nothing). The workloads are that test file's, so the numbers
stay comparable with BENCHMARKS.md ("capture: backward tagging", issue 22):

- ``training``: capture time of the annotated 2-block pre-norm training step (forward, MSE,
  ``loss.backward()``, ``Adam(capturable=True).step()``, scopes ``attn`` / ``mlp`` in each
  block) in three arms: ``backward=False``, ``backward=True``, and ``backward=True`` with the
  node hooks left out (the regions' ranges and the walk at the backward's start alone);
- ``no_grad``: a serving capture (the same 2 blocks and 4 scopes, forward only under
  ``torch.no_grad()``), ``backward=False`` against ``backward=True``.

Each on the compiled capture path (where built) and the pure-Python one; arms interleaved,
``--rounds`` rounds of ``--per-round`` captures an arm, calibration off; medians and the ratio
to ``backward=False``. Prints a JSON report; ``--out FILE`` also writes it.

    python3 benchmarks/backward_capture_gpu.py --rounds 7 --per-round 3 --out bwd.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu"))
import perfetto_graph_ann as pga  # noqa: E402
from blocks import warmup  # noqa: E402
from perfetto_graph_ann.capture import autograd, fastpath  # noqa: E402
from test_backward_truth_gpu import B, D, T, Block, training_step  # noqa: E402  (the test's workloads)


def capture_seconds(step, n):
    """Wall time of ``n`` captures of ``step`` with ``pga.graph`` (calibration off)."""
    times = []
    for _ in range(n):
        g = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with pga.graph(g, calibrate=False):
            step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        del g
    return times


def inference_step(backward):
    torch.manual_seed(0)
    model = nn.Sequential(Block(None, backward), Block(None, backward)).cuda().eval()
    x = torch.randn(B, T, D, device="cuda")

    def step():
        with torch.no_grad():
            model(x)

    return step


def summary(times):
    """Median capture time per arm and its ratio to the ``backward=False`` arm."""
    med = {a: statistics.median(v) for a, v in times.items()}
    base = med["backward=False"]
    return {a: {"median_ms": med[a] * 1e3, "vs_backward_false": med[a] / base, "captures": len(times[a])}
            for a in times}


def training_cost(rounds, per_round):
    arms = {"backward=False": training_step("mse", None, backward=False),
            "backward=True": training_step("mse", None, backward=True),
            "backward=True, no node hooks": training_step("mse", None, backward=True)}
    for s in arms.values():
        warmup(s)
    real_hook = autograd.BackwardTagger.hook
    t = {a: [] for a in arms}
    try:
        for _ in range(rounds):
            for a, s in arms.items():
                autograd.BackwardTagger.hook = (lambda self, node: None) if "no node hooks" in a else real_hook
                t[a] += capture_seconds(s, per_round)
    finally:
        autograd.BackwardTagger.hook = real_hook
    return summary(t)


def no_grad_cost(rounds, per_round):
    arms = {"backward=False": inference_step(False), "backward=True": inference_step(True)}
    for s in arms.values():
        warmup(s)
    t = {a: [] for a in arms}
    for _ in range(rounds):
        for a, s in arms.items():
            t[a] += capture_seconds(s, per_round)
    return summary(t)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Capture cost of backward tagging on a GPU (needs torch with CUDA).")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--per-round", type=int, default=3)
    ap.add_argument("--paths", nargs="+", choices=("compiled", "python"), default=["compiled", "python"])
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    report = {"torch": torch.__version__, "device": torch.cuda.get_device_name(),
              "rounds": args.rounds, "per_round": args.per_round}
    enabled = fastpath.ENABLED
    try:
        for path in args.paths:
            if path == "compiled" and not fastpath.module_built():
                report[f"{path}_skipped"] = f"compiled capture path not built: {fastpath.describe()}"
                continue
            fastpath.ENABLED = path == "compiled"
            report[f"backward_hooks_capture_cost_{path}"] = training_cost(args.rounds, args.per_round)
            report[f"no_grad_capture_cost_{path}"] = no_grad_cost(args.rounds, args.per_round)
    finally:
        fastpath.ENABLED = enabled
    text = json.dumps(report, indent=1, sort_keys=True)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
