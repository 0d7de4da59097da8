"""GPU tests: need torch with CUDA (run on the GPU machine: tests/gpu/run_device.sh)."""
from __future__ import annotations

import json
import os
import sys

import pytest

# test modules and scripts here import their helpers as top-level modules (``blocks``)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import torch

    _HAVE_GPU = torch.cuda.is_available()
except ImportError:
    _HAVE_GPU = False

# Without torch + CUDA these modules cannot even be imported: leave them out of collection
# (on CPU machines they are deselected by the gpu/multigpu markers anyway).
collect_ignore_glob = [] if _HAVE_GPU else ["test_*.py"]

RESULTS = os.environ.get("PGA_GPU_RESULTS")


@pytest.fixture(scope="session")
def results():
    """Numbers the tests measured; written to $PGA_GPU_RESULTS (JSON) at the end."""
    data: dict = {}
    yield data
    if RESULTS:
        with open(RESULTS, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True, default=str)
