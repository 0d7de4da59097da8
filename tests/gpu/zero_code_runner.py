"""A program that never imports perfetto_graph_ann: an HF-style decoder served by a graph runner
(one CUDA graph per batch size, sharing a memory pool, as SGLang / vLLM runners capture), its
own torch.profiler, and an eager reference profile where every module call is wrapped in
``record_function(<module path>)``. Run it under ``perfetto-graph-ann run`` (the test does).

    python zero_code_runner.py OUT MODE     MODE: runner | runner_forward | runner_forward_frozen | runner_compiled |
                                            runner_compiled_forward |
                                            runner_piecewise | runner_decorated | compile |
                                            graphed_callables | cost

Writes into OUT: torch.profiler traces named ``<host>_<pid>.<tag>.pt.trace.json`` (torch's
handler names) and ``truth.json`` (the eager reference: per batch size and module path, the
kernel names launched under that innermost module). ``cost`` prints capture times as JSON.
"""
from __future__ import annotations

import gc
import json
import math
import os
import socket
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

D, H, FF, LAYERS = 256, 4, 512, 2


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Rotary(nn.Module):
    def forward(self, q, k):
        t = q.shape[-2]
        inv = 1.0 / (10000 ** (torch.arange(0, q.shape[-1], 2, device=q.device).float() / q.shape[-1]))
        f = torch.outer(torch.arange(t, device=q.device).float(), inv)
        cos, sin = f.cos().repeat(1, 2), f.sin().repeat(1, 2)

        def rot(x):
            x1, x2 = x.chunk(2, -1)
            return x * cos + torch.cat((-x2, x1), -1) * sin
        return rot(q), rot(k)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(D, D, bias=False) for _ in range(4))
        self.rotary = Rotary()

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, H, D // H).transpose(1, 2)
        k = self.k_proj(x).view(b, t, H, D // H).transpose(1, 2)
        v = self.v_proj(x).view(b, t, H, D // H).transpose(1, 2)
        q, k = self.rotary(q, k)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, D))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(D, FF, bias=False), nn.Linear(D, FF, bias=False)
        self.down_proj = nn.Linear(FF, D, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm, self.self_attn = RMSNorm(D), Attention()
        self.post_attention_layernorm, self.mlp = RMSNorm(D), MLP()

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = RMSNorm(D)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


def decoder_input(bs, seq):
    """The decoder's input for one batch size: hidden states (the model has no embedding)."""
    return torch.randn(bs, seq, D, device="cuda")


class Runner:
    """SGLang-style: torch.cuda.graph(g, pool=...) per batch size, static inputs."""

    def __init__(self, model, batches, seq=16, make_input=None):
        self.model, self.graphs, self.inputs = model, {}, {}
        make_input = make_input or decoder_input
        pool = None
        s = torch.cuda.Stream()
        for bs in sorted(batches, reverse=True):
            x = make_input(bs, seq)
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(2):
                    model(x)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                self.out = model(x)
            pool = g.pool()
            self.graphs[bs], self.inputs[bs] = g, x

    def replay(self, bs):
        self.graphs[bs].replay()


class FrozenRunner(Runner):
    """SGLang's capture (``freeze_gc``, its default): ``gc.collect()`` then ``gc.freeze()`` around
    the captures, ``gc.unfreeze()`` after; frozen objects are in none of the collector's lists."""

    def __init__(self, *args, **kwargs):
        gc.collect()
        gc.freeze()
        try:
            super().__init__(*args, **kwargs)
        finally:
            gc.unfreeze()


class PiecewiseRunner:
    """vLLM's way (its piecewise backend and ``CUDAGraphWrapper``): the model's bound ``forward``
    compiled with a backend that runs inductor's code and captures it itself, inside the
    compiled call, on the third call of each input shape (two warm-up calls before); later calls
    replay it. The capture begins inside compiled code, after the model's call began."""

    def __init__(self, model, batches, seq=16, make_input=None):
        make_input = make_input or decoder_input
        self.fn, self.inputs = torch.compile(model.forward, backend=piecewise_backend(), dynamic=False), {}
        for bs in sorted(batches, reverse=True):
            x = make_input(bs, seq)
            for _ in range(3):
                self.out = self.fn(x)
            self.inputs[bs] = x

    def replay(self, bs):
        self.fn(self.inputs[bs])


class DecoratedRunner(Runner):
    """A program that decorated its model's ``forward`` with ``@torch.compile`` (done here to
    the class, after the eager truth): a plain function is compiled, and the model is known
    only from the frame dynamo compiles; :class:`Runner` captures ``model(x)``."""

    def __init__(self, model, *args, **kwargs):
        cls = type(model)
        cls.forward = torch.compile(cls.forward, dynamic=False)
        super().__init__(model, *args, **kwargs)


def piecewise_backend():
    """A torch.compile backend: inductor's code (no inductor CUDA graphs), captured on its third
    call into a CUDA graph of one shared pool and replayed afterwards (static inputs: the
    runner's per batch size, and the parameters)."""
    from torch._inductor.compile_fx import compile_fx

    pool = [None]

    def backend(gm, example_inputs):
        compiled, state = compile_fx(gm, example_inputs), {"calls": 0}

        def run(*args):
            if "graph" in state:
                state["graph"].replay()
                return state["out"]
            state["calls"] += 1
            if state["calls"] <= 2:
                return compiled(*args)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool[0]):
                out = compiled(*args)
            pool[0] = g.pool()
            state.update(graph=g, out=out)
            return out
        return run
    return backend


def trace_name(out, tag):
    return os.path.join(out, f"{socket.gethostname()}_{os.getpid()}.{tag}.pt.trace.json")


def eager_truth(model, batches, out, seq=16, make_input=None):
    """Eager profile with record_function(<path>) around every module call -> per batch size, the
    innermost path each kernel was launched under (from the trace: launch time within the range);
    ``root.json``: the root's path (its class name: no other path starts with it).
    ``make_input(bs, seq)``: the model's input (default: the decoder's hidden states)."""
    make_input = make_input or decoder_input
    names = {m: n or type(m).__name__ for n, m in model.named_modules()}
    stack = []

    def pre(m, args):
        rf = record_function(names.get(m, type(m).__name__))
        rf.__enter__()
        stack.append(rf)

    def post(m, args, out):
        stack.pop().__exit__(None, None, None)

    hs = [m.register_forward_pre_hook(pre) for m in names] + [m.register_forward_hook(post) for m in names]
    truth = {}
    for bs in batches:
        x = make_input(bs, seq)
        model(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            model(x)
            torch.cuda.synchronize()
        path = os.path.join(out, f"eager_{bs}.json")
        prof.export_chrome_trace(path)
        evs = json.load(open(path))["traceEvents"]
        ranges = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in evs
                        if e.get("cat") == "user_annotation" and e.get("ph") == "X")
        launches = {e["args"]["correlation"]: e["ts"] for e in evs  # cuBLASLt launches through the driver API
                    if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
        per = {}
        for e in evs:
            if e.get("cat") != "kernel":
                continue
            t = launches.get(e["args"]["correlation"])
            inner = None
            for a, b, n in ranges:
                if t is not None and a <= t <= b and (inner is None or a >= inner[0]):
                    inner = (a, n)
            per.setdefault(inner[1] if inner else "", []).append(e["name"])
        truth[bs] = {k: sorted(v) for k, v in per.items()}
    for h in hs:
        h.remove()
    json.dump(type(model).__name__, open(os.path.join(out, "root.json"), "w"))  # the root's path
    return truth


def profile_runner(model, batches, out, truth, seq=16, make_input=None, runner_cls=Runner):
    """``runner`` mode: ``truth(batches)`` saved, one graph per batch size captured by
    ``runner_cls`` (:class:`Runner`), each replayed once (the calibration), then all in a
    shuffled order under the program's own torch.profiler (the order saved)."""
    json.dump(truth(batches), open(os.path.join(out, "truth.json"), "w"))
    runner = runner_cls(model, batches, seq=seq, make_input=make_input)
    for bs in batches:
        runner.replay(bs)  # the first replay outside the profiler: calibration
    torch.cuda.synchronize()
    order = [4, 1, 2, 4, 2, 1]
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for bs in order:
            runner.replay(bs)
        torch.cuda.synchronize()
    prof.export_chrome_trace(trace_name(out, "runner"))
    json.dump(order, open(os.path.join(out, "order.json"), "w"))


def profile_compiled(model, x, out, truth):
    """``compile`` mode: ``torch.compile(model, mode="reduce-overhead")`` warmed up on ``x``,
    three calls profiled, then ``truth([batch of x])`` saved."""
    cm = torch.compile(model, mode="reduce-overhead")
    for _ in range(4):
        cm(x)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            cm(x)
        torch.cuda.synchronize()
    prof.export_chrome_trace(trace_name(out, "compile"))
    json.dump(truth([x.shape[0]]), open(os.path.join(out, "truth.json"), "w"))


def compiled_for_runner(model):
    """``runner_compiled`` mode's model: compiled without inductor's CUDA graphs, for a runner to
    capture itself, as SGLang (``--enable-torch-compile``) and vLLM (its piecewise backend) do;
    one compiled graph per batch size (``dynamic=False``)."""
    return torch.compile(model, dynamic=False)


def compiled_forward_for_runner(model):
    """``runner_compiled_forward`` mode: SGLang's own call (``patch_model`` under
    ``--enable-torch-compile``): the model's bound ``forward`` under ``torch.no_grad()``,
    compiled without inductor's CUDA graphs; the runner calls it, so no module call wraps the
    model itself."""
    return torch.compile(torch.no_grad()(model.forward), dynamic=False)


def runner_mode(model, mode, batches, out, truth, **kw) -> bool:
    """Run one of the runner modes (``runner``, ``runner_forward``, ``runner_forward_frozen``, ``runner_compiled``,
    ``runner_compiled_forward``,
    ``runner_piecewise``, ``runner_decorated``) with :func:`profile_runner`; False for another mode."""
    if mode == "runner":
        profile_runner(model, batches, out, truth, **kw)
    elif mode == "runner_forward":  # SGLang's runner without torch.compile: model.forward(...) called itself
        profile_runner(model.forward, batches, out, truth, **kw)
    elif mode == "runner_forward_frozen":  # the same with the heap frozen while capturing, as SGLang does
        profile_runner(model.forward, batches, out, truth, runner_cls=FrozenRunner, **kw)
    elif mode == "runner_compiled":
        profile_runner(compiled_for_runner(model), batches, out, truth, **kw)
    elif mode == "runner_compiled_forward":
        profile_runner(compiled_forward_for_runner(model), batches, out, truth, **kw)
    elif mode == "runner_piecewise":
        profile_runner(model, batches, out, truth, runner_cls=PiecewiseRunner, **kw)
    elif mode == "runner_decorated":
        profile_runner(model, batches, out, truth, runner_cls=DecoratedRunner, **kw)
    else:
        return False
    return True


def profile_training(model, x, out, loss=lambda y: y.sum()):
    """``graphed_callables`` mode: ``model``'s forward and backward graphed by
    ``make_graphed_callables`` on ``x``; two steps of ``loss(model(x))`` and SGD, then two
    profiled."""
    gm = torch.cuda.make_graphed_callables(model, (x,))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for _ in range(2):
        loss(gm(x)).backward()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            loss(gm(x)).backward()
            opt.step()
            opt.zero_grad()
        torch.cuda.synchronize()
    prof.export_chrome_trace(trace_name(out, "graphed"))


def main():
    out, mode = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    model = Decoder().cuda().eval()
    batches = [1, 2, 4]
    with torch.no_grad():
        if runner_mode(model, mode, batches, out, lambda bs: eager_truth(model, bs, out)):
            pass
        elif mode == "compile":
            profile_compiled(model, decoder_input(2, 16), out, lambda bs: eager_truth(model, bs, out))
        elif mode == "cost":
            res = {}
            for bs in batches:
                x = torch.randn(bs, 16, D, device="cuda")
                model(x)
                torch.cuda.synchronize()
            times = []
            for _ in range(8):
                g = torch.cuda.CUDAGraph()
                x = torch.randn(4, 16, D, device="cuda")
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                with torch.cuda.graph(g):
                    model(x)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            res["capture_s"] = sorted(times)[len(times) // 2]
            print(json.dumps(res))
    if mode == "graphed_callables":
        model.train()
        profile_training(model, torch.randn(2, 16, D, device="cuda", requires_grad=True), out)


if __name__ == "__main__":
    main()
