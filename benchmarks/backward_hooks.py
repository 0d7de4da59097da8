"""CPU micro-benchmark of ``mark_kernels(..., backward=True)``'s own cost (issue 22).

Runs with torch's CPU build and the fake capture backend of the tests (no GPU), on whichever
capture path is enabled (``--python`` forces the pure-Python one). Three costs, each as the
difference between ``backward=True`` and ``backward=False`` around the same work, the best of
``--rounds`` interleaved rounds in process CPU time (a shared CPU's noise only adds time):

- per forward op with grad on, inside a (fake) capture: the region records its range of
  node numbers at entry and exit and observes no op, so this should be nil; measured over a
  chain of small elementwise ops and ``nn.Linear`` on a 3-D input (a composite op: several nodes);
- per forward op under ``torch.no_grad()`` (a serving capture: nothing can be claimed);
- per claimed node in backward, inside a (fake) capture: the walk that claims the node when
  the backward starts, the pre-hook opening a scope and the post-hook closing it, over a chain of ``--nodes`` multiplications. The fake driver's
  node count is a Python callback, so absolute numbers are CPU-only; the GPU figures are in
  BENCHMARKS.md.

Prints a JSON report.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from support.capture_fakes import pushed_capture  # noqa: E402
from perfetto_graph_ann import mark_kernels  # noqa: E402
from perfetto_graph_ann.capture import fastpath  # noqa: E402

STREAM = 0x70


def _forward_ops(x: torch.Tensor, lin: nn.Module, n: int) -> torch.Tensor:
    """``3 * n`` top-level ops: mul, linear (3-D input), add."""
    for _ in range(n):
        x = lin(x * 0.5) + x
    return x


def _time(fn) -> float:
    """CPU seconds of this process (other processes on a shared machine do not count)."""
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def forward_cost(backward: bool, grad: bool, n: int) -> float:
    lin = nn.Linear(8, 8)
    x = torch.randn(2, 3, 8, requires_grad=True)

    def run():
        with torch.set_grad_enabled(grad), mark_kernels("blk", backward=backward):
            _forward_ops(x, lin, n)

    with pushed_capture(STREAM):
        return _time(run)


def backward_cost(backward: bool, nodes: int) -> float:
    with pushed_capture(STREAM):
        x = torch.randn(4, requires_grad=True)
        with mark_kernels("blk", backward=backward):
            h = x
            for _ in range(nodes):
                h = h * 1.0001
        loss = h.sum()
        return _time(loss.backward)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--ops", type=int, default=100, help="loop iterations (3 ops each)")
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--python", action="store_true", help="pure-Python capture path")
    args = ap.parse_args(argv)
    fastpath.ENABLED = fastpath.module_built() and not args.python
    arms = {
        "forward_grad": lambda b: forward_cost(b, True, args.ops),
        "forward_no_grad": lambda b: forward_cost(b, False, args.ops),
        "backward": lambda b: backward_cost(b, args.nodes),
    }
    t = {(a, b): [] for a in arms for b in (False, True)}
    for a in arms:  # warm-up
        for b in (False, True):
            arms[a](b)
    for _ in range(args.rounds):
        for a, fn in arms.items():
            for b in (False, True):
                t[(a, b)].append(fn(b))
    per = {"forward_grad": 3 * args.ops, "forward_no_grad": 3 * args.ops, "backward": args.nodes}
    report = {"capture_path": fastpath.describe(), "torch": torch.__version__, "rounds": args.rounds}
    for a in arms:
        off, on = min(t[(a, False)]), min(t[(a, True)])
        report[a] = {"backward_false_ms": round(off * 1e3, 3), "backward_true_ms": round(on * 1e3, 3),
                     "added_us_per_" + ("node" if a == "backward" else "op"): round((on - off) / per[a] * 1e6, 3)}
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
