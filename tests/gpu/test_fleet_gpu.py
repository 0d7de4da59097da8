"""2 GPUs, NCCL: a live graphed all_reduce step where rank 1 sleeps before each replay; the
fleet report of the two ranks' traces names rank 1 and about the sleep as its lateness."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.multigpu]

HERE = os.path.dirname(os.path.abspath(__file__))
SLEEP_S = 0.02


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_live_fleet_report_names_the_sleeping_rank(tmp_path, results):
    import perfetto_graph_ann as pga

    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_port", "29523", os.path.join(HERE, "fleet_straggler.py"), str(tmp_path),
                           str(SLEEP_S)], env=env, capture_output=True, text=True, timeout=240)
    print(proc.stdout[-4000:], proc.stderr[-4000:])
    assert proc.returncode == 0
    report = pga.fleet_report([tmp_path], progress=False)
    print(report.ranking.to_string(), report.collectives.to_string(), sep="\n")
    top = report.ranking.iloc[0]
    results["fleet_gpu"] = {"ranking": report.ranking.to_dict("records"),
                            "spreads_ns": report.collectives["spread_ns"].tolist()}
    assert top["rank"] == 1
    blamed = report.collectives[report.collectives["blamed"]]
    assert len(blamed) == 5 and (blamed["last_rank"] == 1).all()
    # the host sleep delays rank 1's launch; the GPU may run it a little later still, never earlier
    assert (blamed["spread_ns"] >= 0.8 * SLEEP_S * 1e9).all()
    assert top["median_lateness_ns"] >= 0.4 * SLEEP_S * 1e9  # of 2 ranks the median is their midpoint
