"""2-GPU straggler step (run with torch.distributed.run --nproc_per_node 2 ... OUT_DIR SLEEP_S):
each rank captures ``h = x @ W; all_reduce(h)`` in one CUDA graph with pga.graph, then
profiles REPLAYS replays; rank 1 sleeps SLEEP_S on the host before each replay, so its GPU
work, and its arrival at every all_reduce, is late. Each rank writes
``rank<r>.trace.json.gz`` and ``rank<r>.annotations.json`` into OUT_DIR, the files
``perfetto-graph-ann fleet OUT_DIR`` reads."""
from __future__ import annotations

import gzip
import os
import shutil
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

import perfetto_graph_ann as pga
from perfetto_graph_ann.demo.scenarios import allreduce_model, warmup

REPLAYS = 5


def main(out_dir: str, sleep_s: float) -> None:
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl")
    try:
        step = allreduce_model()
        warmup(step)
        g = torch.cuda.CUDAGraph()
        with pga.graph(g):
            step()
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
        dist.barrier()
        out = Path(out_dir)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(REPLAYS):
                if rank == 1:
                    time.sleep(sleep_s)
                g.replay()
            torch.cuda.synchronize()
        plain = out / f"rank{rank}.trace.json"
        prof.export_chrome_trace(str(plain))
        with open(plain, "rb") as src, gzip.open(out / f"rank{rank}.trace.json.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        plain.unlink()
        pga.save_annotations(str(out / f"rank{rank}.annotations.json"))
        dist.barrier()
        g.reset()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
