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
