"""The public face: the verbs on top, the metric tables under ``pga.metrics``, one name per
concept, ``__all__`` in every module, and the names of the last release still working for
one release with a ``DeprecationWarning``."""
from __future__ import annotations

import ast
import importlib
import inspect
import re
import warnings
from pathlib import Path

import pytest

import perfetto_graph_ann as pga
from perfetto_graph_ann.query import metrics as qm

ROOT = Path(pga.__file__).parent

#: old flat name -> (what it is, the name that replaces it under pga)
RENAMED = {
    "lane_summary": (qm.lane_summary, "metrics.lanes"),
    "lane_top_kernels": (qm.lane_top_kernels, "metrics.top_kernels"),
    "replays": (qm.replays, "metrics.replays"),
    "replay_lanes": (qm.replay_lanes, "metrics.replay_lanes"),
    "collectives": (qm.collectives, "metrics.collectives"),
    "overlap": (qm.overlap, "metrics.overlap"),
    "lane_idle": (qm.lane_idle, "metrics.idle"),
    "lane_gaps": (qm.lane_gaps, "metrics.gaps"),
    "scope_summary": (qm.scope_summary, "metrics.scopes"),
    "scope_instances": (qm.scope_instances, "metrics.scope_instances"),
    "scope_slowest": (qm.scope_slowest, "metrics.slowest_scopes"),
    "module_summary": (qm.module_summary, "metrics.modules"),
    "module_instances": (qm.module_instances, "metrics.module_instances"),
}


def _resolve(dotted: str):
    value = pga
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


@pytest.mark.parametrize("old", sorted(RENAMED))
def test_an_old_metric_name_warns_and_is_the_new_one(old):
    fn, new = RENAMED[old]
    pattern = re.escape(f"perfetto_graph_ann.{old} is deprecated") + ".*" + re.escape(f"perfetto_graph_ann.{new}")
    with pytest.warns(DeprecationWarning, match=pattern):
        got = getattr(pga, old)
    assert got is fn is _resolve(new)


def test_graph_replays_and_join_trace_warn_and_still_work():
    from perfetto_graph_ann.join.join import join

    with pytest.warns(DeprecationWarning, match="graph_replays is deprecated.*metrics.replays"):
        assert pga.graph_replays is qm.graph_replays
    with pytest.warns(DeprecationWarning, match=r"join_trace is deprecated.*read_and_join"):
        assert pga.join_trace is join
    with pytest.warns(DeprecationWarning):
        from perfetto_graph_ann import lane_summary  # noqa: F401  (the from-import form warns too)


def test_old_names_warn_every_time_they_are_looked_up():
    """Not cached in the facade: a second caller is warned too."""
    for _ in range(2):
        with pytest.warns(DeprecationWarning):
            pga.scope_summary


def test_the_public_names_do_not_warn_and_the_old_ones_are_not_listed():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in pga.__all__:
            getattr(pga, name)
        for name in pga.metrics.__all__:
            assert callable(getattr(pga.metrics, name)), name
    assert not set(pga._DEPRECATED) & set(pga.__all__)
    assert not set(pga._DEPRECATED) & set(dir(pga))


def test_verbs_on_top_metrics_under_one_namespace():
    assert len(pga.__all__) <= 33  # 37 names and __version__ before; 32 and __version__ now
    top_metric_functions = [n for n in pga.__all__ if n != "metrics" and getattr(pga, n) in
                            {getattr(qm, m) for m in qm.METRICS if hasattr(qm, m)}]
    assert top_metric_functions == []
    # one name per concept on top: no two public names for one object
    values = [id(getattr(pga, n)) for n in pga.__all__]
    assert len(values) == len(set(values))
    assert pga.metrics.lanes is qm.lane_summary and pga.metrics.replays is qm.replays


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        if path.name.endswith("_pb2.py") or "_site" in path.parts:
            continue
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), path


def _declared_all(path: Path):
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                return node
    return None


def test_every_module_declares_all():
    missing = [name for name, path in _modules() if _declared_all(path) is None]
    assert not missing, missing


def test_every_name_in_all_exists():
    """``__all__`` lists only names the module has (read statically, so no torch import)."""
    bad = []
    for name, path in _modules():
        node = _declared_all(path)
        if node is None or name == "perfetto_graph_ann":  # the facade: lazy, checked above
            continue
        listed = ast.literal_eval(node.value) if not isinstance(node.value, ast.BinOp) else None
        if listed is None:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined = set()
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(n.name)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                defined.add(n.id)
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                defined.update((a.asname or a.name).split(".")[0] for a in n.names)
        bad += [f"{name}.{x}" for x in listed if x not in defined]
    assert not bad, bad


def test_all_of_the_torch_free_modules_imports():
    """``from module import *`` works for every module that needs no torch."""
    for name, _ in _modules():
        if ".capture" in name or name.endswith("__main__") or ".demo" in name:
            continue
        module = importlib.import_module(name)
        for x in getattr(module, "__all__", ()):
            assert hasattr(module, x), f"{name}.{x}"
        assert inspect.ismodule(module)
