"""Workloads for the GPU tests and the capture benchmark (need torch and a CUDA GPU).

The seed's transformer block is the demo's (``seed_block_model``, with its four scopes);
the two-branch ``mark_stream`` example here differs from the demo's (``left`` / ``right``
scopes inside the stream scopes); ``decoder`` is a 36-layer bf16 decoder (RMSNorm, SDPA
attention, SiLU-gated MLP; ~22 kernels a layer) with three nested scopes per layer.
``annotate=False`` runs the same code without any annotation call (the benchmark's baseline).
"""
from __future__ import annotations

import contextlib
import math
from typing import Callable, Dict, List

import torch

import perfetto_graph_ann as pga
from perfetto_graph_ann.demo.scenarios import seed_block_model as seed_block
from perfetto_graph_ann.demo.scenarios import warmup

__all__ = ["PreNormBlock", "capture", "capture_set", "decoder", "decoder_weights", "seed_block", "two_branch", "warmup"]


class PreNormBlock(torch.nn.Module):
    """The layers and math of a pre-norm transformer block, without scopes (the backward
    tagging tests, CPU and GPU, place theirs around ``attn`` and ``mlp`` differently):
    LayerNorm, qkv Linear on 3-D input, chunk, causal SDPA over ``heads`` heads, out-proj;
    LayerNorm, Linear -> GELU -> Linear. Residuals are the subclass's ``forward``'s."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        nn = torch.nn
        self.d, self.heads = d, heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def attn(self, x: torch.Tensor) -> torch.Tensor:
        F = torch.nn.functional
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, self.d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(a.transpose(1, 2).reshape(b, t, self.d))

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        F = torch.nn.functional
        return self.fc2(F.gelu(self.fc1(self.ln2(x))))


def _scope(annotate, ann, backward=True):
    return pga.mark_kernels(ann, backward=backward) if annotate else contextlib.nullcontext()


def two_branch(annotate: bool = True):
    x = torch.randn(1024, 1024, device="cuda")
    lw, rw = torch.randn_like(x), torch.randn_like(x)
    left, right = torch.empty_like(x), torch.empty_like(x)
    ls, rs = torch.cuda.Stream(), torch.cuda.Stream()

    def fwd():
        cur = torch.cuda.current_stream()
        ls.wait_stream(cur)
        rs.wait_stream(cur)
        with (pga.mark_stream(ls, "left_projection") if annotate else torch.cuda.stream(ls)):
            with _scope(annotate, "left"):
                torch.mm(x, lw, out=left)
        with (pga.mark_stream(rs, "right_projection") if annotate else torch.cuda.stream(rs)):
            with _scope(annotate, "right"):
                torch.mm(x, rw, out=right)
        cur.wait_stream(ls)
        cur.wait_stream(rs)
        with _scope(annotate, "combine"):
            return left + right

    return fwd


def capture(fn, annotated: bool = True, keep_graph: bool = False, calibrate: bool = True):
    """Warm up, then capture ``fn`` with pga.graph (annotated) or torch.cuda.graph."""
    warmup(fn)
    g = torch.cuda.CUDAGraph(keep_graph=keep_graph) if keep_graph else torch.cuda.CUDAGraph()
    ctx = pga.graph(g, calibrate=calibrate) if annotated else torch.cuda.graph(g)
    with ctx:
        out = fn()
    return g, out


def decoder_weights(layers: int = 36, d: int = 1024, ffn: int = 2816, seed: int = 0) -> List[Dict[str, torch.Tensor]]:
    """bf16 weights of a ``layers``-layer decoder (shared by every batch size's graph)."""
    g = torch.Generator(device="cuda").manual_seed(seed)

    def w(*shape):
        return (torch.randn(*shape, device="cuda", generator=g) / math.sqrt(shape[0])).to(torch.bfloat16)

    return [{"n1": torch.ones(d, device="cuda", dtype=torch.bfloat16), "qkv": w(d, 3 * d), "o": w(d, d),
             "n2": torch.ones(d, device="cuda", dtype=torch.bfloat16), "gu": w(d, 2 * ffn), "down": w(ffn, d)}
            for _ in range(layers)]


def decoder(weights: List[Dict[str, torch.Tensor]], batch: int = 16, seq: int = 128, heads: int = 16,
            annotate: bool = True, backward: bool = True) -> Callable[[], torch.Tensor]:
    """The decoder's forward on a fixed bf16 input of ``batch`` sequences (``backward``: the
    scopes' ``mark_kernels`` argument).

    Per layer: ``{"name": "layer", "layer": i}`` around ``attn`` and ``mlp`` (three nested
    scopes); RMSNorm written out (pow, mean, add, rsqrt, mul, mul), SDPA on causal heads,
    SiLU-gated MLP, residual adds.
    """
    d = weights[0]["o"].shape[0]
    ffn = weights[0]["down"].shape[0]
    hd = d // heads
    x = torch.randn(batch, seq, d, device="cuda", generator=torch.Generator(device="cuda").manual_seed(batch))
    x = x.to(torch.bfloat16)

    def norm(h, w):
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    def layer(h, P):
        with _scope(annotate, "attn", backward):
            qkv = norm(h, P["n1"]) @ P["qkv"]
            q, k, v = (t.view(batch, seq, heads, hd).transpose(1, 2) for t in qkv.split(d, dim=-1))
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            h = h + a.transpose(1, 2).reshape(batch, seq, d) @ P["o"]
        with _scope(annotate, "mlp", backward):
            gate, up = (norm(h, P["n2"]) @ P["gu"]).split(ffn, dim=-1)
            return h + (torch.nn.functional.silu(gate) * up) @ P["down"]

    def fwd():
        h = x
        for i, P in enumerate(weights):
            with _scope(annotate, {"name": "layer", "layer": i}, backward):
                h = layer(h, P)
        return h

    return fwd


def capture_set(fns, annotated: bool = True, calibrate: bool = True, fn_secs=None):
    """Capture each of ``fns`` (largest batch first) into its own graph, all sharing one
    memory pool, as serving engines capture their batch sizes. Returns (graphs, outputs,
    capture seconds); ``fn_secs`` (a list) gets the time spent in each ``fn`` itself."""
    import time

    graphs, outs, secs = [], [], []
    pool = None
    for fn in fns:
        g = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        ctx = pga.graph(g, pool=pool, calibrate=calibrate) if annotated else torch.cuda.graph(g, pool=pool)
        with ctx:
            t1 = time.perf_counter()
            outs.append(fn())
            if fn_secs is not None:
                fn_secs.append(time.perf_counter() - t1)
        torch.cuda.synchronize()
        secs.append(time.perf_counter() - t0)
        pool = g.pool() if pool is None else pool
        graphs.append(g)
    return graphs, outs, secs
