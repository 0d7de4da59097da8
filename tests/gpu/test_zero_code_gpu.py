"""Zero code (issue 31) on the GPU: ``perfetto-graph-ann run --modules -- python zero_code_runner.py``.

The runner (tests/gpu/zero_code_runner.py) never imports this package. Ground truth: an eager
profile of the same model where every module call is wrapped in ``record_function(<path>)``
(kernel -> its launch -> the innermost module range). Per replay and module path, the multiset
of kernel names the join gives must equal the truth for that batch size.
"""
from __future__ import annotations

import collections
import glob
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from perfetto_graph_ann.annotations.files import load_annotations
from perfetto_graph_ann.join import join
from perfetto_graph_ann.read.kineto import read_trace

pytestmark = pytest.mark.gpu

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RUNNER = HERE / "zero_code_runner.py"


def run_instrumented(out: Path, mode: str, *extra: str, runner: Path = RUNNER,
                     runner_args: tuple = ()) -> subprocess.CompletedProcess:
    """``perfetto-graph-ann run [extra] --out OUT -- python RUNNER OUT MODE [runner_args]``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "perfetto_graph_ann", "run", *extra, "--out", str(out), "--",
           sys.executable, str(runner), str(out), mode, *runner_args]
    cp = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=400)
    assert cp.returncode == 0, cp.stderr[-3000:]
    return cp


def run_with_fresh_inductor(tmp_path: Path, mode: str, *extra: str, **kw) -> Path:
    """``run_instrumented`` into ``tmp_path / "o"`` with an empty inductor cache (a cache hit
    generates no code, so nothing would be recorded); returns the output folder."""
    out = tmp_path / "o"
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor")
    try:
        run_instrumented(out, mode, *extra, **kw)
    finally:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    return out


def joined(out: Path, tag: str):
    (trace_path,) = glob.glob(str(out / f"*.{tag}.pt.trace.json"))
    worker = os.path.basename(trace_path).split(".", 1)[0]
    ann = load_annotations(out / f"{worker}.pga")
    trace = read_trace(trace_path)
    return trace, join(trace, ann), ann


def per_replay_modules(trace, layout):
    """launch correlation -> module path -> sorted kernel names (kernels without a module: "")."""
    out = collections.defaultdict(lambda: collections.defaultdict(list))
    for e in trace.events:
        if e.is_gpu_work and e.category == "kernel" and e.index in layout.placements:
            p = layout.placements[e.index]
            out[e.correlation][p.args.get("module", "")].append(e.name)
    return {c: {k: sorted(v) for k, v in m.items()} for c, m in out.items()}


def kernel_kinds(trace, layout, kind) -> collections.Counter:
    """Graphed kernels counted by ``kind(args of their placement)``."""
    out = collections.Counter()
    for e in trace.events:
        if e.is_gpu_work and e.category == "kernel" and e.index in layout.placements:
            out[kind(layout.placements[e.index].args)] += 1
    return out


def unlabelled_names(trace, layout, top: int = 8) -> dict:
    """The graphed kernels no module path was given to, by graph and kernel name (the ``top``
    most frequent of each graph): what a training step leaves unlabelled, for the results."""
    per = collections.defaultdict(collections.Counter)
    for e in trace.events:
        if e.is_gpu_work and e.category == "kernel" and e.index in layout.placements:
            a = layout.placements[e.index].args
            if "module" not in a:
                per[str(a.get("graph id", "?"))][e.name[:60]] += 1
    return {g: c.most_common(top) for g, c in per.items()}


def runner_against_truth(out: Path, root_called: bool = True) -> tuple:
    """The runner's replays (``order.json``) joined, each compared with the eager truth of its
    batch size: (summary dict, mismatches, the annotations). ``root_called=False``: the runner
    called ``model.forward`` itself, so no scope of the model's own opens and the kernels its
    forward launches outside any submodule are in no module ("")."""
    truth = {int(k): v for k, v in json.loads((out / "truth.json").read_text()).items()}
    if not root_called:
        root = json.loads((out / "root.json").read_text())
        for per in truth.values():
            if root in per:
                per[""] = sorted(per.get("", []) + per.pop(root))
    order = json.loads((out / "order.json").read_text())
    trace, layout, ann = joined(out, "runner")
    got = per_replay_modules(trace, layout)
    launches = sorted((e.ts_ns, e.correlation) for e in trace.events if e.name == "cudaGraphLaunch" and e.ph == "X")
    assert len(launches) == len(order)
    res = {"graphs": len(ann.graphs), "report": {k: v for k, v in layout.report.as_dict().items()
                                                 if k in ("matched", "unmatched", "replay_graphs", "ambiguous")}}
    mismatches = []
    for (_, corr), bs in zip(launches, order):
        if got[corr] != truth[bs]:
            diff = {p: (got[corr].get(p), truth[bs].get(p)) for p in set(got[corr]) | set(truth[bs])
                    if got[corr].get(p) != truth[bs].get(p)}
            mismatches.append({"bs": bs, "diff": {k: v for k, v in list(diff.items())[:4]}})
    res["replays"] = len(launches)
    res["mismatches"] = mismatches[:3]
    res["paths"] = sorted(truth[min(truth)])[:12]
    return res, mismatches, ann


def test_runner_in_a_child_process_module_paths_equal_the_eager_truth(tmp_path, results):
    out = tmp_path / "o"
    run_instrumented(out, "runner", "--modules")
    res, mismatches, ann = runner_against_truth(out)
    results["zero_code_runner"] = res
    print("zero_code_runner", json.dumps(res)[:4000])
    assert len(ann.graphs) == 3 and not mismatches


@pytest.mark.parametrize("mode", ["runner_forward", "runner_forward_frozen"])
def test_runner_calling_forward_itself_gets_the_models_paths(tmp_path, results, mode):
    """SGLang's runner without torch.compile calls ``model.forward(...)``: the first module
    called is a layer, yet the paths are the model's (``layers.0.self_attn.q_proj``), from the
    module's owners, or from the stack where SGLang's frozen heap hides them (Python >= 3.12)."""
    if mode == "runner_forward_frozen" and sys.version_info < (3, 12):
        pytest.skip("with the heap frozen the model is found on the stack: Python >= 3.12")
    out = tmp_path / "o"
    run_instrumented(out, mode, "--modules")
    res, mismatches, ann = runner_against_truth(out, root_called=False)
    results[f"zero_code_{mode}"] = res
    print(f"zero_code_{mode}", json.dumps(res)[:4000])
    assert len(ann.graphs) == 3 and not mismatches


LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "fc1", "fc2")


def test_reduce_overhead_module_paths_from_inductor(tmp_path, results):
    """``torch.compile(mode="reduce-overhead")``: kernels get module paths from what inductor
    recorded (issue 31 item 4). Independent check against the eager truth: the library (cuBLAS)
    kernels under a path are among those the eager model launched inside that module (inductor
    calls the same mm), and a Linear's path holds exactly its GEMMs. (A kernel fusing one layer's
    residual add with the next layer's norm has no layer: their common ancestor is the model;
    adjacent extern calls, q/k/v, share their common module.)"""
    compiled_run_is_right(tmp_path, results, "zero_code_compile", "compile")


def compiled_run_is_right(tmp_path: Path, results: dict, key: str, mode: str, graphs: Optional[int] = None,
                          **kw) -> None:
    """Run ``mode`` (``compile``: the trace tag ``compile``; the runner modes: ``runner``)
    with a fresh inductor cache and check it with :func:`compiled_against_truth`: graphs
    annotated (``graphs`` of them where given), no label wrong, and more kernels with a module
    path (exact or common ancestor) than with the region's name only. ``kw``: run_instrumented's."""
    out = run_with_fresh_inductor(tmp_path, mode, "--modules", **kw)
    res, wrong, kinds, ann = compiled_against_truth(out, tag="runner" if mode.startswith("runner") else "compile")
    results[key] = res
    print(key, json.dumps(res)[:4000])
    assert (len(ann.graphs) == graphs if graphs is not None else ann.graphs) and not wrong
    assert kinds["exact"] + kinds["common ancestor"] > kinds["unknown"]


def compiled_against_truth(out: Path, batch: str = "2", tag: str = "compile") -> tuple:
    """The compiled run's replays joined and checked against the eager truth of ``batch`` (tag
    ``runner``: of each replay's batch size, from ``order.json``): (summary dict, wrong labels,
    kernels by module origin, the annotations)."""
    trace, layout, ann = joined(out, tag)
    truths = json.loads((out / "truth.json").read_text())
    got = per_replay_modules(trace, layout)
    batch_of = collections.defaultdict(lambda: batch)
    if tag == "runner":
        launches = sorted((e.ts_ns, e.correlation) for e in trace.events if e.name == "cudaGraphLaunch" and e.ph == "X")
        order = json.loads((out / "order.json").read_text())
        assert len(launches) == len(order)
        batch_of.update({corr: str(bs) for (_, corr), bs in zip(launches, order)})
    kinds = kernel_kinds(trace, layout, lambda a: a.get("module origin", "none"))
    res = {"graphs": len(ann.graphs), "replays": len(got), "kernels": dict(kinds),
           "origins": layout.report.module_origins, "paths": sorted({p for m in got.values() for p in m})[:40],
           "report": {k: v for k, v in layout.report.as_dict().items() if k in ("matched", "unmatched", "ambiguous")}}
    root = json.loads((out / "root.json").read_text())
    wrong = []
    for corr, mods in got.items():
        truth = truths[batch_of[corr]]
        for path, names in mods.items():
            leaf = path.rsplit(".", 1)[-1]
            gemms = collections.Counter(n for n in names if not n.startswith("triton"))
            # under the root: everything the model launched (its children's paths do not start with its name)
            subtree = collections.Counter(n for p, ns in truth.items()
                                          if path and (path == root or p == path or p.startswith(path + "."))
                                          for n in ns)
            if path and gemms - subtree:  # a library kernel the eager model never launched under that path
                wrong.append({"path": path, "extra": sorted((gemms - subtree).elements())[:3]})
            if leaf in LINEARS and names != truth.get(path):
                wrong.append({"path": path, "got": names[:3], "truth": (truth.get(path) or [])[:3]})
    res["wrong"] = wrong[:5]
    res["linear_paths"] = sorted({p for m in got.values() for p in m if p.rsplit(".", 1)[-1] in LINEARS})
    return res, wrong, kinds, ann


#: Frameworks' ways of capturing compiled code (zero_code_runner's modes): the runner capturing
#: ``torch.compile(model)``; SGLang's own call, ``torch.compile(torch.no_grad()(model.forward))``
#: called by the runner (no module call wraps the model); vLLM's piecewise way, the capture
#: made by the torch.compile backend inside the compiled call; a forward compiled by its
#: ``@torch.compile`` decorator (a plain function: the model known from dynamo's frame only).
COMPILED_RUNNER_MODES = ["runner_compiled", "runner_compiled_forward", "runner_piecewise", "runner_decorated"]


@pytest.mark.parametrize("mode", COMPILED_RUNNER_MODES)
def test_runner_capturing_compiled_code(tmp_path, results, mode):
    """SGLang's and vLLM's ways with torch.compile: the model compiled without inductor's CUDA
    graphs, captured by the framework (one graph per batch size, one pool). Compiled graphs
    run inside a capture: kernels get module paths from what inductor recorded (or the
    compiled region's name), none contradicting the eager truth of their batch size."""
    compiled_run_is_right(tmp_path, results, f"zero_code_{mode}", mode, graphs=3)


def labels_in_order(trace, layout) -> list:
    """Every graphed kernel's (name, module path, module origin), in start order."""
    return [(e.name, layout.placements[e.index].args.get("module", ""),
             layout.placements[e.index].args.get("module origin", "none"))
            for e in sorted(trace.events, key=lambda e: (e.ts_ns, e.index))
            if e.is_gpu_work and e.category == "kernel" and e.index in layout.placements]


def cache_runs_are_right(tmp_path: Path, results: dict, key: str, mode: str, **kw) -> None:
    """The same compiled runner program (``mode``) four times with one inductor cache:

    - ``filled``: the cache filled with compile records off (as a run without module scopes, or
      before this package kept records, fills it);
    - ``unrecorded``: the code loaded from the cache, no record of it: the compiled kernels keep
      the region's name only and the program is warned once;
    - ``fresh``: ``run --fresh-compile`` generates the code again (and keeps its records);
    - ``hit``: loaded from the cache again, its records found: every kernel gets the very label
      the fresh compile gave it, in order, and no warning; checked against the eager truth too.

    ``kw``: run_instrumented's (another runner)."""
    from perfetto_graph_ann.capture.compiled import UNRECORDED_WARNING

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor")
    runs = {}
    try:
        for name, extra, records in (("filled", (), "off"), ("unrecorded", (), None),
                                     ("fresh", ("--fresh-compile",), None), ("hit", (), None)):
            if records:
                os.environ["PERFETTO_GRAPH_ANN_COMPILE_RECORDS"] = records
            try:
                runs[name] = run_instrumented(tmp_path / name, mode, "--modules", *extra, **kw)
            finally:
                os.environ.pop("PERFETTO_GRAPH_ANN_COMPILE_RECORDS", None)
    finally:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    said = {name: cp.stderr.count(UNRECORDED_WARNING.split(":", 1)[1].strip()[:60]) for name, cp in runs.items()}
    tag = "runner" if mode.startswith("runner") else "compile"
    kinds, labels = {}, {}
    for name in runs:
        trace, layout, _ = joined(tmp_path / name, tag)
        kinds[name] = dict(kernel_kinds(trace, layout, lambda a: a.get("module origin", "none")))
        labels[name] = labels_in_order(trace, layout)
    res, wrong, hit_kinds, _ = compiled_against_truth(tmp_path / "hit", tag=tag)
    same = sum(a == b for a, b in zip(labels["hit"], labels["fresh"]))
    records = sorted(os.listdir(tmp_path / "inductor" / "perfetto_graph_ann"))
    results[key] = {"warned": said, "kinds": kinds, "hit_equal_to_fresh": same, "kernels": len(labels["hit"]),
                    "records": len(records), "hit_wrong": wrong[:5]}
    print(key, json.dumps(results[key]))
    assert said == {"filled": 0, "unrecorded": 1, "fresh": 0, "hit": 0}
    u = kinds["unrecorded"]
    assert u.get("unknown", 0) and not u.get("exact") and not u.get("common ancestor")
    assert kinds["filled"] == kinds["fresh"]  # records off changes nothing of a generating run's labels
    assert labels["hit"] == labels["fresh"] and not wrong
    assert hit_kinds["exact"] + hit_kinds["common ancestor"] > hit_kinds["unknown"]


@pytest.mark.parametrize("mode", ["runner_compiled", "runner_piecewise", "compile"])
def test_compiled_code_from_inductors_cache_gets_its_compile_records_paths(tmp_path, results, mode):
    """A warm start: runners capturing compiled code (SGLang's, vLLM's ways) and
    ``mode="reduce-overhead"`` (``compile``: cudagraph trees capture inside the compiled call)."""
    cache_runs_are_right(tmp_path, results, "zero_code_inductor_cache" + ("" if mode == "runner_compiled" else
                                                                           f"_{mode}"), mode)


def test_make_graphed_callables_training_step(tmp_path, results):
    out = tmp_path / "o"
    run_instrumented(out, "graphed_callables", "--modules")
    trace, layout, ann = joined(out, "graphed")
    phases = kernel_kinds(trace, layout, lambda a: a.get("autograd_phase", "forward") if "module" in a
                          else "unlabelled")
    res = {"graphs": len(ann.graphs), "kernels": dict(phases), "report": layout.report.replay_graphs,
           "unlabelled": unlabelled_names(trace, layout)}
    results["zero_code_graphed_callables"] = res
    print("zero_code_graphed_callables", json.dumps(res))
    assert len(ann.graphs) == 2 and phases["forward"] and phases["backward"]


def test_capture_cost_plain_instrumented_modules(tmp_path, results):
    """Capture of the runner's decoder (batch 4) in fresh processes, the three arms alternating."""
    arms = {"plain": None, "instrumented": (), "modules": ("--modules",)}
    got = collections.defaultdict(list)
    for r in range(2):
        for name in (list(arms) if r % 2 == 0 else list(arms)[::-1]):
            out = tmp_path / f"{name}{r}"
            out.mkdir()
            if arms[name] is None:
                cp = subprocess.run([sys.executable, str(RUNNER), str(out), "cost"], capture_output=True, text=True,
                                    timeout=300)
            else:
                cp = run_instrumented(out, "cost", *arms[name])
            assert cp.returncode == 0, cp.stderr[-2000:]
            got[name].append(json.loads(cp.stdout.strip().splitlines()[-1])["capture_s"])
    res = {k: [round(x * 1e3, 3) for x in v] for k, v in got.items()}
    results["zero_code_capture_ms"] = res
    print("zero_code_capture_ms", json.dumps(res))
