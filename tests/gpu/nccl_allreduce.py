"""2-GPU check (run with torch.distributed.run --nproc_per_node 2): a graphed all_reduce is
annotated automatically with the eager trace's collective fields.

Each rank: eager ``h = x @ W; dist.all_reduce(h)`` under torch.profiler (the reference
fields, read from the NCCL kernel's args), then the same step captured with pga.graph and
no annotation code. Rank 0 writes both, the node's annotation and lane labels to argv[1].
"""
from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

import perfetto_graph_ann as pga
from nccl_collectives import FIELDS, eager_args  # same folder: the script's own
from perfetto_graph_ann.capture.registry import REGISTRY
from perfetto_graph_ann.demo.scenarios import allreduce_model, warmup


def main(out_path: str) -> None:
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl")
    step = allreduce_model()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    eager = eager_args(step)[0]
    dist.barrier()
    warmup(step)
    g = torch.cuda.CUDAGraph()
    with pga.graph(g):
        step()
    wrapped_after = getattr(dist.all_reduce, "__pga_original__", None) is not None
    g.replay()  # both ranks' first replay: the one calibration records
    torch.cuda.synchronize()
    rec = REGISTRY.get(g._pga_owner)
    nccl = [n for n in rec.nodes if n.type == "kernel" and "nccl" in (n.kernel or "").lower()]
    other = [n for n in rec.nodes if n.type == "kernel" and "nccl" not in (n.kernel or "").lower()]
    result = {
        "rank": rank,
        "eager": {k: eager.get(k) for k in FIELDS},
        "eager_types": {k: type(eager.get(k)).__name__ for k in FIELDS},
        "graph_nccl_nodes": [{"kernel": n.kernel, "annotation": dict(n.annotation), "stream": n.stream,
                              "ordinal": n.ordinal} for n in nccl],
        "graph_types": {k: type(nccl[0].annotation.get(k)).__name__ for k in FIELDS} if nccl else {},
        "other_kernels_annotated": [dict(n.annotation) for n in other if n.annotation],
        "lanes": REGISTRY.lanes.snapshot(),
        "dist_all_reduce_still_wrapped_after_capture": wrapped_after,
    }
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(result, f, indent=1, default=str)
    print(json.dumps(result, default=str)[:3000], flush=True)
    dist.barrier()
    g.reset()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
