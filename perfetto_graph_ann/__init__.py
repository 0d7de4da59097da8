"""perfetto_graph_ann: CUDA-graph annotations for PyTorch profiles, natively in Perfetto.

Flow: ``capture`` (mark regions while capturing a CUDA graph; produces an
``annotations.AnnotationSet``) -> ``read`` (torch.profiler JSON, exact) -> ``join``
(replayed kernels to graph nodes) -> ``write`` (Perfetto TrackEvent protobuf, or annotated
Chrome JSON) -> ``query`` (trace processor + the ``graph_ann`` PerfettoSQL package,
DataFrames). ``pipeline`` is where read, join and write are wired together.

Capture needs torch and a GPU; everything else runs anywhere. Public names are imported
lazily so ``import perfetto_graph_ann`` never imports torch.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

# public name -> module that defines it (relative to this package), or (module, attribute)
_LAZY = {
    # capture
    "graph": "capture.api",
    "mark_kernels": "capture.marks",
    "mark_stream": "capture.marks",
    "calibrate": "capture.api",
    "annotate_collective": "capture.collectives",
    "get_stream_for_pg": "capture.collectives",
    "is_available": "capture.backends",
    "backend_info": "capture.backends",
    "get_kernel_annotations": "capture.registry",
    "save_annotations": "capture.recorded",
    # every capture of the process, whoever captures (zero-code), and module scopes
    "instrument": "capture.instrument",
    "uninstrument": "capture.instrument",
    "mark_modules": "capture.modules",
    "ModuleScopes": "capture.modules",
    # the annotation model and its files (torch-free)
    "load_annotations": "annotations.files",
    "AnnotationSet": "annotations.model",
    "CaptureIdentity": "annotations.model",
    # from a live torch.profiler
    "export": "capture.export",
    "trace_handler": "capture.handler",
    # read, join and the pipeline that wires them to the writers
    "read_trace": "read.kineto",
    "join_trace": ("join.join", "join"),  # not "join": that name is the subpackage
    "convert": "pipeline.convert",
    "merge": "pipeline.merge",
    "diff": "pipeline.diff",
    "DiffConfig": "query.diff",
    # query
    "open_trace": "query.session",
    "query_many": "pipeline.fleet",
    # many ranks, many machines
    "fleet_report": "pipeline.fleet",
    "FleetReport": "query.straggler",
    "RayOptions": "query.executors",
    "lane_summary": "query.metrics",
    "replays": "query.metrics",
    "collectives": "query.metrics",
    "overlap": "query.metrics",
    "lane_top_kernels": "query.metrics",
    "replay_lanes": "query.metrics",
    "lane_idle": "query.metrics",
    "lane_gaps": "query.metrics",
    "scope_summary": "query.metrics",
    "scope_instances": "query.metrics",
    "scope_slowest": "query.metrics",
    "graph_replays": "query.metrics",
    "module_summary": "query.metrics",
    "module_instances": "query.metrics",
    "EngineConfig": "query.engine.config",
}

__all__ = sorted(_LAZY) + ["__version__"]

if TYPE_CHECKING:  # what IDEs and type checkers see; at run time __getattr__ imports on first use
    from .annotations.files import load_annotations
    from .annotations.model import AnnotationSet, CaptureIdentity
    from .capture.api import calibrate, graph
    from .capture.marks import mark_kernels, mark_stream
    from .capture.backends import backend_info, is_available
    from .capture.collectives import annotate_collective, get_stream_for_pg
    from .capture.export import export
    from .capture.handler import trace_handler
    from .capture.instrument import instrument, uninstrument
    from .capture.modules import ModuleScopes, mark_modules
    from .capture.recorded import save_annotations
    from .capture.registry import get_kernel_annotations
    from .join.join import join as join_trace
    from .pipeline.convert import convert
    from .pipeline.diff import diff
    from .pipeline.fleet import fleet_report, query_many
    from .pipeline.merge import merge
    from .query.diff import DiffConfig
    from .query.engine.config import EngineConfig
    from .query.executors import RayOptions
    from .query.metrics import (collectives, graph_replays, lane_gaps, lane_idle, lane_summary, lane_top_kernels,
                                module_instances, module_summary, overlap, replay_lanes, replays, scope_instances,
                                scope_slowest, scope_summary)
    from .query.session import open_trace
    from .query.straggler import FleetReport
    from .read.kineto import read_trace


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    mod, attr = target if isinstance(target, tuple) else (target, name)
    value = getattr(importlib.import_module(f".{mod}", __name__), attr)
    globals()[name] = value
    return value


def __dir__():
    return __all__
