"""What wrapping ``nn.Module`` for module scopes costs a capture, on the CPU (issue 31).

torch's own ``nn.Module`` (the CPU build) and a 36-layer module decoder (325 module calls a
forward, each leaf launching its kernels on the fake CUDA backend of the tests), captured under
``instrument(modules=True)``: the module hooks' start and end (the class attribute set and put
back) timed for each attribute the hooks could wrap (``_call_impl``, what they wrap, and
``__call__``, what they wrapped before), and the whole capture's begin / body / end. Arms
alternate; medians. Prints JSON.

``--scopes``: instead, the captured forward (body) of four arms, alternating: ``plain`` (not
instrumented), ``idle_hooks`` (torch's global module pre- and post-hooks registered, doing
nothing: what any hook-based module scope pays first), ``instrument`` (``instrument()``) and
``modules`` (``instrument(modules=True)``); medians, and per module call (325) the idle hooks
over plain and the module scopes over ``instrument()``.

    python benchmarks/module_swap_cpu.py [--rounds 40] [--scopes]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from support.capture_fakes import FAKE_TORCH_STREAM, FakeCuda, fake_torch  # noqa: E402

import perfetto_graph_ann as pga  # noqa: E402
from perfetto_graph_ann.capture import backends, modules  # noqa: E402

CUDA = FakeCuda()
CUDA.watchable = True


def launch(name):
    CUDA.launch(FAKE_TORCH_STREAM, name)


class Leaf(torch.nn.Module):
    def __init__(self, kernels):
        super().__init__()
        self.kernels = kernels

    def forward(self, h):
        for k in self.kernels:
            launch(k)
        return h


class Pair(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.norm, self.proj, self.out = Leaf(["norm"]), Leaf(["gemm"] + inner), Leaf(["gemm"])

    def forward(self, h):
        return self.out(self.proj(self.norm(h)))


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn, self.mlp = Pair(["attn%d" % i for i in range(8)]), Pair(["act%d" % i for i in range(6)])

    def forward(self, h):
        return self.mlp(self.attn(h))


class Decoder(torch.nn.Module):
    def __init__(self, n=36):
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer() for _ in range(n))

    def forward(self, h):
        for layer in self.layers:
            h = layer(h)
        return h


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--scopes", action="store_true")
    args = ap.parse_args()
    fakes = fake_torch(CUDA).cuda
    for name in ("graph", "CUDAGraph", "current_device", "current_stream", "synchronize", "is_current_stream_capturing"):
        setattr(torch.cuda, name, getattr(fakes, name))
    if args.scopes:
        scope_arms(Decoder(), args.rounds)
        return
    model, hooks = Decoder(), modules.HOOKS
    steps = {}
    for name in ("capture_started", "capture_ended"):
        orig = getattr(hooks, name)

        def timed(*a, _orig=orig, _name=name, **k):
            t0 = time.perf_counter()
            try:
                return _orig(*a, **k)
            finally:
                steps[_name] = time.perf_counter() - t0
        setattr(hooks, name, timed)
    real = modules.wrapped_attribute
    got = {"_call_impl": [], "__call__": []}
    with backends.use(CUDA), torch.no_grad():
        for r in range(args.rounds):
            for attr in (got if r % 2 == 0 else list(got)[::-1]):
                modules.wrapped_attribute = (lambda cls, _a=attr: _a)
                with pga.instrument(modules=True, calibrate=False):
                    g = torch.cuda.CUDAGraph()
                    ctx = torch.cuda.graph(g)
                    t0 = time.perf_counter()
                    ctx.__enter__()
                    t1 = time.perf_counter()
                    model(0)
                    t2 = time.perf_counter()
                    ctx.__exit__(None, None, None)
                    t3 = time.perf_counter()
                got[attr].append((steps["capture_started"], steps["capture_ended"], t1 - t0, t2 - t1, t3 - t2))
    modules.wrapped_attribute = real
    med = statistics.median
    parts = ("hooks start", "hooks end", "begin", "body", "end")
    print(json.dumps({"rounds": args.rounds, "torch": torch.__version__, "python": sys.version.split()[0],
                      "module subclasses": len(_subclasses(torch.nn.Module)),
                      "us": {a: {p: round(med(v[i] for v in vals) * 1e6, 1) for i, p in enumerate(parts)}
                             for a, vals in got.items()}}, indent=1))


def _body(model) -> float:
    """One capture of ``model`` on the fake backend: its forward's seconds."""
    g = torch.cuda.CUDAGraph()
    ctx = torch.cuda.graph(g)
    ctx.__enter__()
    t0 = time.perf_counter()
    model(0)
    t1 = time.perf_counter()
    ctx.__exit__(None, None, None)
    return t1 - t0


def scope_arms(model, rounds: int) -> None:
    """``--scopes``: see the module's docstring."""
    mm = torch.nn.modules.module
    arms = {"plain": [], "idle_hooks": [], "instrument": [], "modules": []}
    with backends.use(CUDA), torch.no_grad():
        for r in range(rounds):
            for a in (list(arms) if r % 2 == 0 else list(arms)[::-1]):
                if a == "plain":
                    arms[a].append(_body(model))
                elif a == "idle_hooks":
                    pre = mm.register_module_forward_pre_hook(lambda m, x: None)
                    post = mm.register_module_forward_hook(lambda m, x, out: None)
                    try:
                        arms[a].append(_body(model))
                    finally:
                        pre.remove()
                        post.remove()
                else:
                    with pga.instrument(modules=a == "modules", calibrate=False):
                        arms[a].append(_body(model))
    us = {a: statistics.median(v) * 1e6 for a, v in arms.items()}
    calls = 1 + 9 * len(model.layers)
    print(json.dumps({"rounds": rounds, "torch": torch.__version__, "python": sys.version.split()[0],
                      "module calls": calls, "body us": {a: round(v, 1) for a, v in us.items()},
                      "idle hooks over plain, us a call": round((us["idle_hooks"] - us["plain"]) / calls, 2),
                      "modules over instrument, us a call": round((us["modules"] - us["instrument"]) / calls, 2)},
                     indent=1))


def _subclasses(cls, seen=None):
    seen = set() if seen is None else seen
    for sub in cls.__subclasses__():
        if sub not in seen:
            seen.add(sub)
            _subclasses(sub, seen)
    return seen


if __name__ == "__main__":
    main()
