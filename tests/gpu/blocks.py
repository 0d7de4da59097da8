"""Workloads for the GPU tests and the capture benchmark (need torch and a CUDA GPU).

The seed's transformer block (B=4, T=256, D=1024, H=8, fp32) with its four scopes, and
the two-branch ``mark_stream`` example. ``annotate=False`` runs the same code without
any annotation call (the benchmark's baseline).
"""
from __future__ import annotations

import contextlib
import math

import torch

import perfetto_graph_ann as pga


def _scope(annotate, ann):
    return pga.mark_kernels(ann) if annotate else contextlib.nullcontext()


def seed_block(annotate: bool = True, layers: int = 1):
    """The seed's block; ``layers`` > 1 chains that many blocks (the benchmark's larger capture)."""
    torch.manual_seed(0)
    B, T, D, H = 4, 256, 1024, 8
    hd = D // H
    x = torch.randn(B, T, D, device="cuda")
    params = [{
        "Wqkv": torch.randn(D, 3 * D, device="cuda") / math.sqrt(D),
        "Wo": torch.randn(D, D, device="cuda") / math.sqrt(D),
        "W1": torch.randn(D, 4 * D, device="cuda") / math.sqrt(D),
        "W2": torch.randn(4 * D, D, device="cuda") / math.sqrt(4 * D),
    } for _ in range(layers)]

    def block(h, P):
        with _scope(annotate, "qkv_proj"):
            qkv = h @ P["Wqkv"]
        q, k, v = qkv.split(D, dim=-1)
        q = q.view(B, T, H, hd).transpose(1, 2)
        k = k.view(B, T, H, hd).transpose(1, 2)
        v = v.view(B, T, H, hd).transpose(1, 2)
        with _scope(annotate, {"name": "attention", "stream": 62}):
            s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
            a = torch.softmax(s, dim=-1)
            ctx = (a @ v).transpose(1, 2).reshape(B, T, D)
        with _scope(annotate, "out_proj"):
            o = ctx @ P["Wo"]
        with _scope(annotate, {"name": "mlp", "stream": 61}):
            return torch.nn.functional.gelu(o @ P["W1"]) @ P["W2"]

    def fwd():
        h = x
        for P in params:
            h = block(h, P)
        return h

    return fwd


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


def warmup(fn, n: int = 3):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(n):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()


def capture(fn, annotated: bool = True, keep_graph: bool = False, calibrate: bool = True):
    """Warm up, then capture ``fn`` with pga.graph (annotated) or torch.cuda.graph."""
    warmup(fn)
    g = torch.cuda.CUDAGraph(keep_graph=keep_graph) if keep_graph else torch.cuda.CUDAGraph()
    ctx = pga.graph(g, calibrate=calibrate) if annotated else torch.cuda.graph(g)
    with ctx:
        out = fn()
    return g, out
