"""Zero code (issue 31) on models nobody here tuned it to: Hugging Face ``transformers``' Llama,
Qwen2 and GPT-2 (``hf_runner.py``), each under ``perfetto-graph-ann run --modules`` in a child
process that never imports this package.

Ground truth as in ``test_zero_code_gpu.py``: an eager profile of the same model with every
module call wrapped in ``record_function(<path>)``. A runner's replays must give, per replay and
module path, exactly the truth's multiset of kernel names; the compiled model's kernels must
carry no path the truth contradicts.

Needs ``transformers`` on the GPU machine (not a dependency of this package: carry its wheels,
see tests/gpu/RESULTS.md); without it these tests are skipped with that reason.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from test_zero_code_gpu import compiled_against_truth, run_instrumented, runner_against_truth

pytestmark = pytest.mark.gpu

HERE = Path(__file__).resolve().parent
RUNNER = HERE / "hf_runner.py"


@pytest.fixture(autouse=True)
def _transformers():
    pytest.importorskip("transformers", reason="transformers is not installed (carry its wheels to the GPU machine)")


@pytest.mark.parametrize("model", ["llama", "qwen2", "gpt2"])
def test_hf_runner_module_paths_equal_the_eager_truth(tmp_path, results, model):
    out = tmp_path / "o"
    run_instrumented(out, "runner", "--modules", runner=RUNNER, runner_args=(model,))
    res, mismatches, ann = runner_against_truth(out)
    results[f"hf_runner_{model}"] = res
    print(f"hf_runner_{model}", json.dumps(res)[:4000])
    assert len(ann.graphs) == 3 and not mismatches


@pytest.mark.parametrize("model", ["llama", "qwen2", "gpt2"])
def test_hf_reduce_overhead_module_paths(tmp_path, results, model):
    out = tmp_path / "o"
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor")  # a cache hit records nothing
    try:
        run_instrumented(out, "compile", "--modules", runner=RUNNER, runner_args=(model,))
    finally:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    res, wrong, kinds, ann = compiled_against_truth(out)
    results[f"hf_compile_{model}"] = res
    print(f"hf_compile_{model}", json.dumps(res)[:4000])
    assert ann.graphs and not wrong
    assert kinds["exact"] + kinds["common ancestor"] > kinds["unknown"]
