"""Benchmark (issue 31): what naming a root from its owners costs (``capture.owners.outermost``).

    python benchmarks/module_owners.py [--objects 0 1000000 3000000] [--rounds 5]

A runner that calls ``model.forward(...)`` itself makes the inner model the first module a
capture calls; its paths are then named from the model that holds it, found among the garbage
collector's objects in one pass. This runs once per root, at the first capture that meets it.
For a 36-layer decoder (``torch.nn`` modules: 400 of them) in a process holding ``--objects``
extra objects (small dicts with a list, as a program's data), it times ``outermost(model.model)``
(a held module: the referrers' scan and the pass) and ``outermost(model)`` (the model a runner
calls, held by nothing: the scan only), and prints the median and best of ``--rounds``, per
tracked object too.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from torch import nn  # noqa: E402

from perfetto_graph_ann.capture.owners import outermost  # noqa: E402


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = nn.LayerNorm(8), nn.LayerNorm(8)
        self.self_attn = nn.ModuleDict({k: nn.Linear(8, 8) for k in ("q_proj", "k_proj", "v_proj", "o_proj")})
        self.mlp = nn.ModuleDict({k: nn.Linear(8, 8) for k in ("gate_proj", "up_proj", "down_proj")})


class Inner(nn.Module):
    def __init__(self, layers: int) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(16, 8)
        self.layers = nn.ModuleList(Layer() for _ in range(layers))
        self.norm = nn.LayerNorm(8)


class CausalLM(nn.Module):
    def __init__(self, layers: int) -> None:
        super().__init__()
        self.model, self.lm_head = Inner(layers), nn.Linear(8, 16)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, nargs="+", default=[0, 1_000_000, 3_000_000])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    model = CausalLM(36)
    print(f"{platform.node()} {platform.machine()} Python {platform.python_version()} "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; load {os.getloadavg()[0]:.2f}; "
          f"{sum(1 for _ in model.modules())} modules")
    print("| extra objects | tracked objects | module | median ms | best ms | ns a tracked object (median) |")
    print("| ---: | ---: | --- | ---: | ---: | ---: |")
    for n in args.objects:
        data = [{"a": i, "b": [i]} for i in range(n // 2)]  # two tracked objects each
        tracked = len(gc.get_objects())
        for label, module, want in (("held (`model.model`)", model.model, (model, "model")),
                                    ("not held (`model`)", model, None)):
            times = []
            for _ in range(args.rounds):
                t = time.perf_counter()
                found = outermost(module, nn.Module)
                times.append(time.perf_counter() - t)
                assert found == want
            med = statistics.median(times)
            print(f"| {n:,} | {tracked:,} | {label} | {med * 1e3:.1f} | {min(times) * 1e3:.1f} | "
                  f"{med * 1e9 / tracked:.0f} |")
        del data


if __name__ == "__main__":
    main()
