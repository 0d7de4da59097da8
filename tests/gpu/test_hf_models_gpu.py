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
import sys
from pathlib import Path

import pytest

from test_zero_code_gpu import (COMPILED_RUNNER_MODES, cache_runs_are_right, compiled_run_is_right, joined, kernel_kinds,
                                run_instrumented, runner_against_truth, unlabelled_names)

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


@pytest.mark.parametrize("model,mode", [("llama", "runner_forward"), ("gpt2", "runner_forward"),
                                        ("llama", "runner_forward_frozen")])
def test_hf_runner_calling_forward_itself_gets_the_models_paths(tmp_path, results, model, mode):
    """SGLang's way without torch.compile: ``model.forward(...)`` captured, so the inner model is
    the first module called; the paths are still the whole model's (``model.layers.0...``,
    ``transformer.h.0...``), with the heap frozen as SGLang freezes it too (Python >= 3.12)."""
    if mode == "runner_forward_frozen" and sys.version_info < (3, 12):
        pytest.skip("with the heap frozen the model is found on the stack: Python >= 3.12")
    out = tmp_path / "o"
    run_instrumented(out, mode, "--modules", runner=RUNNER, runner_args=(model,))
    res, mismatches, ann = runner_against_truth(out, root_called=False)
    results[f"hf_{mode}_{model}"] = res
    print(f"hf_{mode}_{model}", json.dumps(res)[:4000])
    assert len(ann.graphs) == 3 and not mismatches


@pytest.mark.parametrize("model", ["llama", "qwen2", "gpt2"])
def test_hf_reduce_overhead_module_paths(tmp_path, results, model):
    compiled_run_is_right(tmp_path, results, f"hf_compile_{model}", "compile", runner=RUNNER, runner_args=(model,))


@pytest.mark.parametrize("mode", COMPILED_RUNNER_MODES)
def test_hf_llama_runner_capturing_compiled_code(tmp_path, results, mode):
    """Llama compiled without inductor's CUDA graphs and captured by the framework (SGLang's and
    vLLM's ways): no kernel's path contradicts the eager truth of its batch size."""
    key = "hf_runner_compiled_llama" if mode == "runner_compiled" else f"hf_{mode}_llama"
    compiled_run_is_right(tmp_path, results, key, mode, graphs=3, runner=RUNNER, runner_args=("llama",))


def test_hf_llama_warm_start_from_inductors_cache(tmp_path, results):
    """SGLang's call on Llama, four runs with one inductor cache (a warm start finds the compile
    records: :func:`test_zero_code_gpu.cache_runs_are_right`)."""
    cache_runs_are_right(tmp_path, results, "hf_llama_inductor_cache", "runner_compiled_forward", runner=RUNNER,
                         runner_args=("llama",))


def test_hf_llama_training_step_through_make_graphed_callables(tmp_path, results):
    """Forward and backward graphs of a training step: both phases labelled, and every module
    path a kernel got is one of the model's own (``names.json``), forward or backward."""
    out = tmp_path / "o"
    run_instrumented(out, "graphed_callables", "--modules", runner=RUNNER, runner_args=("llama",))
    trace, layout, ann = joined(out, "graphed")
    names = set(json.loads((out / "names.json").read_text()))
    phases = kernel_kinds(trace, layout, lambda a: a.get("autograd_phase", "forward") if "module" in a
                          else "unlabelled")
    paths = kernel_kinds(trace, layout, lambda a: a.get("module"))
    res = {"graphs": len(ann.graphs), "kernels": dict(phases), "report": layout.report.replay_graphs,
           "paths": len(paths), "foreign": sorted(p for p in paths if p is not None and p not in names)[:5],
           "unlabelled": unlabelled_names(trace, layout)}
    results["hf_graphed_callables_llama"] = res
    print("hf_graphed_callables_llama", json.dumps(res))
    assert len(ann.graphs) == 2 and phases["forward"] and phases["backward"] and not res["foreign"]
