"""Cost of one ``mark_kernels`` scope on the capture path, with and without backward tagging.

torch 2.15's signature makes ``backward=True`` the default. Our backward tagging enters a
Python ``TorchFunctionMode`` for the scope, so every op in it passes through Python. This
times a scope (enter + exit, plus N CPU tensor ops inside) in a capture on the fake driver
(tests/support/capture_fakes.py: no GPU, no driver calls), so only the Python side is measured.
Prints a Markdown table for BENCHMARKS.md.

    python benchmarks/scope_backward.py --ops 0 5 --scopes 2000
"""
from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import torch  # noqa: E402
from support.capture_fakes import FakeCuda  # noqa: E402

from perfetto_graph_ann import mark_kernels  # noqa: E402
from perfetto_graph_ann.capture import backends  # noqa: E402
from perfetto_graph_ann.capture import session as S  # noqa: E402
from perfetto_graph_ann.capture.registry import Registry  # noqa: E402

STREAM = 0x70


def per_scope_us(backward: bool, ops: int, scopes: int, repeats: int) -> float:
    """Best of ``repeats`` runs: microseconds per scope holding ``ops`` ops."""
    x = torch.ones(4, requires_grad=True)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(scopes):
            with mark_kernels("x", backward=backward):
                for _ in range(ops):
                    x * 2
        best = min(best, (time.perf_counter() - t) / scopes)
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, nargs="+", default=[0, 5])
    ap.add_argument("--scopes", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    cuda = FakeCuda()
    cuda.begin_capture(STREAM)
    sess = S.CaptureSession(cuda, STREAM, Registry())
    sess.start()
    S.push(sess)
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.processor() or platform.machine()}, "
          f"torch {torch.__version__}, Python {platform.python_version()}")
    print("| grad mode | ops in scope | backward=False | backward=True |")
    print("| --- | ---: | ---: | ---: |")
    try:
        with backends.use(cuda):
            for grad in (True, False):
                with torch.set_grad_enabled(grad):
                    for ops in args.ops:
                        off, on = (per_scope_us(b, ops, args.scopes, args.repeats) for b in (False, True))
                        print(f"| {'enabled' if grad else 'no_grad'} | {ops} | {off:.1f} us | {on:.1f} us |")
    finally:
        S.pop(sess)


if __name__ == "__main__":
    main()
