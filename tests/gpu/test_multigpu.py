"""2 GPUs, NCCL: the graphed all_reduce carries the eager trace's collective fields."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.multigpu]

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_graphed_all_reduce_has_eager_fields(tmp_path, results):
    out = tmp_path / "nccl.json"
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_port", "29517", os.path.join(HERE, "nccl_allreduce.py"), str(out)],
                          env=env, capture_output=True, text=True, timeout=240)
    print(proc.stdout[-4000:], proc.stderr[-4000:])
    assert proc.returncode == 0
    r = json.loads(out.read_text())
    results["nccl"] = r
    assert len(r["graph_nccl_nodes"]) == 1
    ann = r["graph_nccl_nodes"][0]["annotation"]
    for k, v in r["eager"].items():
        assert ann[k] == v, k
    assert r["graph_types"] == r["eager_types"]
    assert r["eager"]["Collective name"] == "allreduce" and r["eager"]["Process Group Ranks"] == "[0, 1]"
    lane = ann["stream"]
    assert lane >= 60 and r["lanes"][str(lane)] == "default_pg (all_reduce)"
    assert r["other_kernels_annotated"] == []
    assert r["dist_all_reduce_still_wrapped_after_capture"] is False
    assert r["graph_nccl_nodes"][0]["stream"] is not None  # calibrated with both ranks replaying


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_every_wrapped_collective_has_eager_fields(tmp_path, results):
    out0, out1 = tmp_path / "rank0.json", tmp_path / "rank1.json"
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_port", "29519", os.path.join(HERE, "nccl_collectives.py"), str(out0), str(out1)],
                          env=env, capture_output=True, text=True, timeout=240)
    print(proc.stdout[-6000:], proc.stderr[-4000:])
    assert proc.returncode == 0
    by_rank = [json.loads(out0.read_text()), json.loads(out1.read_text())]
    results["nccl_collectives"] = by_rank
    failures = []
    for rank, res in enumerate(by_rank):
        for name, r in res.items():
            if name == "barrier" and "error" in r:
                continue  # a barrier synchronises the host: capturing it is torch's error, recorded
            if "error" in r:
                failures.append(f"rank {rank} {name}: {r['error']}")
                continue
            if len(r["graphed"]) != len(r["eager"]) or not r["eager"]:
                failures.append(f"rank {rank} {name}: {len(r['eager'])} eager vs {len(r['graphed'])} graphed NCCL kernels")
                continue
            for e, g, et, gt in zip(r["eager"], r["graphed"], r["eager_types"], r["graphed_types"]):
                for k, v in e.items():
                    if k == "kernel":
                        continue
                    if g["annotation"].get(k) != v or gt.get(k) != et[k]:
                        failures.append(f"rank {rank} {name}: {k} eager {v!r} ({et[k]}) graphed "
                                        f"{g['annotation'].get(k)!r} ({gt.get(k)})")
                if not isinstance(g["annotation"].get("stream"), int) or g["annotation"]["stream"] < 60:
                    failures.append(f"rank {rank} {name}: no process-group lane: {g['annotation'].get('stream')!r}")
            if r["other_kernels_annotated"]:  # the collective's event nodes are its own: annotated too
                failures.append(f"rank {rank} {name}: non-NCCL kernels annotated: {r['other_kernels_annotated']}")
    assert not failures, "\n".join(failures)
    for res in by_rank:  # a second process group: its own name, description and lane
        main_, sub = res["all_reduce"]["graphed"][0]["annotation"], res["all_reduce_subgroup"]["graphed"][0]["annotation"]
        assert sub["Process Group Name"] != main_["Process Group Name"] and sub["stream"] != main_["stream"]
        assert sub["Process Group Description"] == "tp_group"
