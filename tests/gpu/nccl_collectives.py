"""2-GPU check (torch.distributed.run --nproc_per_node 2): every torch.distributed collective we
wrap, graphed inside pga.graph with no annotation code, carries the eager trace's fields.

For each collective: run it eagerly under torch.profiler and read the NCCL kernel's args (the
reference), then capture the same call in its own pga.graph and read the NCCL node's
annotation. Rank 0 writes ``{collective: {"eager": ..., "graphed": [...], "error": ...}}`` to
argv[1]. A collective that cannot be captured at all (it synchronises the host) is recorded
with its error, not hidden.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

import perfetto_graph_ann as pga
from perfetto_graph_ann.capture.registry import REGISTRY

FIELDS = ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype", "In split size",
          "Out split size", "Process Group Name", "Process Group Description", "Process Group Ranks")


def calls(rank: int, world: int, subgroup):
    """name -> a zero-argument step on fixed tensors (the same tensors eager and graphed)."""
    n = 1 << 16
    x = torch.arange(n, device="cuda", dtype=torch.float32) + rank
    xb = x.to(torch.bfloat16)
    gathered = torch.empty(n * world, device="cuda")
    gathered_list = [torch.empty(n, device="cuda") for _ in range(world)]
    rs_out = torch.empty(n // world, device="cuda")
    rs_list = [torch.empty(n // world, device="cuda") for _ in range(world)]
    a2a_out = torch.empty(n, device="cuda")
    # uneven splits: every rank sends a = n//4 elements to rank 0 and b = n - a to rank 1, so
    # rank 0 receives [a, a] and rank 1 [b, b]
    a, b = n // 4, n - n // 4
    a2av_out = torch.empty(2 * (a if rank == 0 else b), device="cuda")
    buf = torch.empty(n, device="cuda")

    def sendrecv():
        if rank == 0:
            dist.send(x, 1)
        else:
            dist.recv(buf, 0)

    steps = {
        "all_reduce": lambda: dist.all_reduce(x),
        "all_reduce_bf16": lambda: dist.all_reduce(xb),
        "all_reduce_subgroup": lambda: dist.all_reduce(x, group=subgroup),
        "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(gathered, x),
        "all_gather": lambda: dist.all_gather(gathered_list, x),
        "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(rs_out, x),
        "reduce_scatter": lambda: dist.reduce_scatter(rs_out, rs_list),
        "all_to_all_single": lambda: dist.all_to_all_single(a2a_out, x),
        "broadcast": lambda: dist.broadcast(x, 0),
        "reduce": lambda: dist.reduce(x, 0),
        "send_recv": sendrecv,
    }
    if world == 2:
        out_splits = [a, a] if rank == 0 else [b, b]
        steps["all_to_all_single_splits"] = lambda: dist.all_to_all_single(
            a2av_out, x, output_split_sizes=out_splits, input_split_sizes=[a, b])
    steps["barrier"] = lambda: dist.barrier()  # last: capturing it may fail and poison the context
    return steps


def eager_args(step) -> list:
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "t.json")
        prof.export_chrome_trace(p)
        with open(p) as f:
            evs = json.load(f)["traceEvents"]
    return [{k: e["args"].get(k) for k in FIELDS if k in e["args"]} | {"kernel": e.get("name")}
            for e in evs if e.get("cat") == "kernel" and "Collective name" in e.get("args", {})]


def main(out_path: str) -> None:
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    subgroup = dist.new_group(list(range(world)), group_desc="tp_group")  # a second process group
    results = {}
    for name, step in calls(rank, world, subgroup).items():
        r: dict = {}
        try:
            for _ in range(2):
                step()
            torch.cuda.synchronize()
            dist.barrier()
            r["eager"] = eager_args(step)
            r["eager_types"] = [{k: type(v).__name__ for k, v in e.items()} for e in r["eager"]]
            dist.barrier()
            torch.cuda.synchronize()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):  # warm up on a side stream, as torch's docs ask before capture
                step()
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            dist.barrier()
            g = torch.cuda.CUDAGraph()
            with pga.graph(g, calibrate=False):
                step()
            rec = REGISTRY.get(g._pga_owner)
            r["graphed"] = [{"kernel": n.kernel, "annotation": dict(n.annotation)}
                            for n in rec.nodes if n.type == "kernel" and "nccl" in (n.kernel or "").lower()]
            r["graphed_types"] = [{k: type(v).__name__ for k, v in g_["annotation"].items()} for g_ in r["graphed"]]
            r["other_kernels_annotated"] = [dict(n.annotation) for n in rec.nodes if n.type == "kernel"
                                            and n.annotation and "nccl" not in (n.kernel or "").lower()]
            r["annotated_node_types"] = sorted({n.type for n in rec.nodes if n.annotation})
            torch.cuda.synchronize()
            dist.barrier()
            g.replay()
            torch.cuda.synchronize()
            dist.barrier()
            g.reset()
        except Exception as e:  # record and go on: one collective must not hide the others
            r["error"] = f"{type(e).__name__}: {e}"[:500]
            r["traceback"] = traceback.format_exc()[-1500:]
            torch.cuda.synchronize()
        results[name] = r
        print(rank, name, json.dumps(r, default=str)[:800], flush=True)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(results, f, indent=1, default=str)
    elif len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            json.dump(results, f, indent=1, default=str)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
