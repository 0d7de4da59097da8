"""Workloads for the GPU tests and the capture benchmark (need torch and a CUDA GPU).

The seed's transformer block is the demo's (``seed_block_model``, with its four scopes);
the two-branch ``mark_stream`` example here differs from the demo's (``left`` / ``right``
scopes inside the stream scopes). ``annotate=False`` runs the same code without any
annotation call (the benchmark's baseline).
"""
from __future__ import annotations

import contextlib

import torch

import perfetto_graph_ann as pga
from perfetto_graph_ann.demo.scenarios import seed_block_model as seed_block
from perfetto_graph_ann.demo.scenarios import warmup

__all__ = ["capture", "seed_block", "two_branch", "warmup"]


def _scope(annotate, ann):
    return pga.mark_kernels(ann) if annotate else contextlib.nullcontext()


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
