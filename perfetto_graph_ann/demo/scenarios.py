"""The tutorial's three scenarios, captured live with this package's API (CUDA only).

Each scenario builds its model, captures it with :func:`perfetto_graph_ann.graph` under
``mark_kernels`` / ``mark_stream`` scopes (collectives are annotated automatically),
replays it a few times, profiles ``replays`` replays with ``torch.profiler`` and writes the
Chrome trace plus the annotation sidecar into ``out_dir``. The model code is the one the
shipped H200 recordings were made with, so a live run gives the same lane table.

torch is imported inside the functions: importing this module needs no GPU.
"""
from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path
from typing import Callable, List, Optional

from .recordings import Recording

__all__ = ["allreduce", "allreduce_model", "cuda_device_count", "live_recordings", "seed_block", "seed_block_model",
           "two_branch", "warmup", "WARMUP_REPLAYS"]

WARMUP_REPLAYS = 3


def cuda_device_count() -> int:
    """Number of usable CUDA devices; 0 when torch is missing or has no CUDA (never raises)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return 0
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # a broken CUDA install counts as none
        return 0


def warmup(fn: Callable[[], object], n: int = 3) -> None:
    """Run ``fn`` ``n`` times on a side stream before capture, as torch.cuda.graph's docs ask."""
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(n):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()


def _capture(fn: Callable[[], object]):
    import torch

    import perfetto_graph_ann as pga

    warmup(fn)
    g = torch.cuda.CUDAGraph()
    with pga.graph(g):
        fn()
    return g


def _profile(g, replays: int, trace_path: Path) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(WARMUP_REPLAYS):
        g.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            g.replay()
        torch.cuda.synchronize()
    tmp = trace_path.with_suffix("")  # torch writes plain JSON; *.json.gz is compressed by us
    prof.export_chrome_trace(str(tmp))
    from ..util.atomic import atomic_write

    with open(tmp, "rb") as src, atomic_write(trace_path) as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
    os.unlink(tmp)


def _save(sidecar: Path) -> None:
    import perfetto_graph_ann as pga

    pga.save_annotations(str(sidecar))


def _record(fwd: Callable[[], object], name: str, title: str, out_dir: Path, replays: int) -> Recording:
    """Capture ``fwd``, profile ``replays`` replays into ``<name>.trace.json.gz`` and save the
    annotations next to it."""
    g = _capture(fwd)
    rec = Recording(name, title, out_dir / f"{name}.trace.json.gz", out_dir / f"{name}.annotations.json")
    _profile(g, replays, rec.trace)
    _save(rec.annotations)
    g.reset()
    return rec


def seed_block_model(annotate: bool = True, layers: int = 1) -> Callable[[], object]:
    """The seed's transformer block (B=4, T=256, D=1024, H=8, fp32) with its four scopes, as
    a forward function on fixed random inputs (seed 0).

    ``annotate=False`` runs the same code without any annotation call (the capture
    benchmark's baseline); ``layers`` > 1 chains that many blocks (its larger capture).
    """
    import torch

    import perfetto_graph_ann as pga

    def scope(ann):
        return pga.mark_kernels(ann) if annotate else contextlib.nullcontext()

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
        with scope("qkv_proj"):
            qkv = h @ P["Wqkv"]
        q, k, v = qkv.split(D, dim=-1)
        q = q.view(B, T, H, hd).transpose(1, 2)
        k = k.view(B, T, H, hd).transpose(1, 2)
        v = v.view(B, T, H, hd).transpose(1, 2)
        with scope({"name": "attention", "stream": 62}):
            s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
            a = torch.softmax(s, dim=-1)
            ctx = (a @ v).transpose(1, 2).reshape(B, T, D)
        with scope("out_proj"):
            o = ctx @ P["Wo"]
        with scope({"name": "mlp", "stream": 61}):
            return torch.nn.functional.gelu(o @ P["W1"]) @ P["W2"]

    def fwd():
        h = x
        for P in params:
            h = block(h, P)
        return h

    return fwd


def allreduce_model() -> Callable[[], object]:
    """``h = x @ W; all_reduce(h)`` on fixed random inputs (seed 0); needs a NCCL process
    group. Inside ``pga.graph`` the collective is annotated automatically."""
    import torch
    import torch.distributed as dist

    torch.manual_seed(0)
    D = 1024
    x = torch.randn(4, 256, D, device="cuda")
    w = torch.randn(D, D, device="cuda") / math.sqrt(D)

    def step():
        h = x @ w
        dist.all_reduce(h)
        return h

    return step


def seed_block(out_dir: Path, replays: int) -> Recording:
    """The seed's transformer block (:func:`seed_block_model`), captured and profiled."""
    return _record(seed_block_model(), "seed_block",
                   "transformer block: qkv_proj, attention (lane 62), out_proj, mlp (lane 61)", out_dir, replays)


def two_branch(out_dir: Path, replays: int) -> Recording:
    """Two identical 1024x1024 GEMMs on two side streams (``mark_stream``) joined by an add."""
    import torch

    import perfetto_graph_ann as pga

    torch.manual_seed(0)
    x = torch.randn(1024, 1024, device="cuda")
    lw, rw = torch.randn_like(x), torch.randn_like(x)
    left, right = torch.empty_like(x), torch.empty_like(x)
    ls, rs = torch.cuda.Stream(), torch.cuda.Stream()

    def fwd():
        cur = torch.cuda.current_stream()
        # mark_stream inserts no dependencies: order the side streams explicitly.
        with pga.mark_stream(ls, "left_projection"):
            ls.wait_stream(cur)
            torch.mm(x, lw, out=left)
        with pga.mark_stream(rs, "right_projection"):
            rs.wait_stream(cur)
            torch.mm(x, rw, out=right)
        cur.wait_stream(ls)
        cur.wait_stream(rs)
        with pga.mark_kernels("combine"):
            return left + right

    return _record(fwd, "two_branch", "two-branch mark_stream block: left_projection, right_projection, combine",
                   out_dir, replays)


def _allreduce_worker(rank: int, world: int, out_dir: str, replays: int, port: int) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    try:
        fwd = allreduce_model()
        for _ in range(3):
            fwd()
        torch.cuda.synchronize()
        out = Path(out_dir)
        # the eager reference, which carries the collective metadata natively
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                fwd()
            torch.cuda.synchronize()
        if rank == 0:
            p = out / "allreduce_eager_rank0.trace.json"
            prof.export_chrome_trace(str(p))
        dist.barrier()
        g = _capture(fwd)
        _profile(g, replays, out / f"allreduce_rank{rank}.trace.json.gz")
        _save(out / f"allreduce_rank{rank}.annotations.json")
        dist.barrier()
        g.reset()
    finally:
        dist.destroy_process_group()


def allreduce(out_dir: Path, replays: int, world: int = 2) -> Recording:
    """A 2-rank ``x @ W; all_reduce`` step over NCCL; the graphed collective is annotated automatically."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_allreduce_worker, args=(world, str(out_dir), replays, port), nprocs=world, join=True)
    eager_json = out_dir / "allreduce_eager_rank0.trace.json"
    eager = out_dir / "allreduce_eager_rank0.trace.json.gz"
    from ..util.atomic import atomic_write

    with open(eager_json, "rb") as src, atomic_write(eager) as dst:
        dst.write(src.read())
    os.unlink(eager_json)
    return Recording("allreduce", f"{world}-rank x @ W + all_reduce step in a CUDA graph (rank 0; all ranks "
                     "in allreduce_rank*.trace.json.gz)", out_dir / "allreduce_rank0.trace.json.gz",
                     out_dir / "allreduce_rank0.annotations.json", eager)


def live_recordings(out_dir: Path, replays: int = 5, devices: Optional[int] = None) -> List[Recording]:
    """Capture and profile the scenarios on this machine's GPUs (the all_reduce needs 2 or more)."""
    import torch

    devices = cuda_device_count() if devices is None else devices
    torch.cuda.set_device(0)
    recs = [seed_block(out_dir, replays), two_branch(out_dir, replays)]
    if devices >= 2:
        recs.append(allreduce(out_dir, replays))
    return recs
