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
import warnings
from typing import TYPE_CHECKING, Any

from ._version import __version__

# public name -> module that defines it (relative to this package), or (module, attribute);
# (module, None): the module itself
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
    "read_and_join": "pipeline.joined",
    "convert": "pipeline.convert",
    "merge": "pipeline.merge",
    "diff": "pipeline.diff",
    "DiffConfig": "query.diff",
    # query: a session, the metric tables (pga.metrics.lanes(...)), many traces
    "open_trace": "query.session",
    "metrics": ("metrics", None),
    "query_many": "pipeline.fleet",
    "fleet_report": "pipeline.fleet",
    "FleetReport": "query.straggler",
    "RayOptions": "query.executors",
    "EngineConfig": "query.engine.config",
}

#: Names of earlier releases, kept for one release with a DeprecationWarning:
#: old name -> (module, attribute, what to use instead).
_DEPRECATED = {
    "lane_summary": ("metrics", "lanes", "perfetto_graph_ann.metrics.lanes"),
    "lane_top_kernels": ("metrics", "top_kernels", "perfetto_graph_ann.metrics.top_kernels"),
    "replays": ("metrics", "replays", "perfetto_graph_ann.metrics.replays"),
    "replay_lanes": ("metrics", "replay_lanes", "perfetto_graph_ann.metrics.replay_lanes"),
    "collectives": ("metrics", "collectives", "perfetto_graph_ann.metrics.collectives"),
    "overlap": ("metrics", "overlap", "perfetto_graph_ann.metrics.overlap"),
    "lane_idle": ("metrics", "idle", "perfetto_graph_ann.metrics.idle"),
    "lane_gaps": ("metrics", "gaps", "perfetto_graph_ann.metrics.gaps"),
    "scope_summary": ("metrics", "scopes", "perfetto_graph_ann.metrics.scopes"),
    "scope_instances": ("metrics", "scope_instances", "perfetto_graph_ann.metrics.scope_instances"),
    "scope_slowest": ("metrics", "slowest_scopes", "perfetto_graph_ann.metrics.slowest_scopes"),
    "module_summary": ("metrics", "modules", "perfetto_graph_ann.metrics.modules"),
    "module_instances": ("metrics", "module_instances", "perfetto_graph_ann.metrics.module_instances"),
    "graph_replays": ("query.metrics", "graph_replays", "perfetto_graph_ann.metrics.replays (one row per replay)"),
    "join_trace": ("join.join", "join", "perfetto_graph_ann.read_and_join(trace, annotations).layout"),
}
#: The release that drops :data:`_DEPRECATED`.
_REMOVED_IN = "0.2.0"

__all__ = sorted(_LAZY) + ["__version__"]

if TYPE_CHECKING:  # what IDEs and type checkers see; at run time __getattr__ imports on first use
    from . import metrics
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
    from .pipeline.convert import convert
    from .pipeline.diff import diff
    from .pipeline.fleet import fleet_report, query_many
    from .pipeline.joined import read_and_join
    from .pipeline.merge import merge
    from .query.diff import DiffConfig
    from .query.engine.config import EngineConfig
    from .query.executors import RayOptions
    from .query.session import open_trace
    from .query.straggler import FleetReport
    from .read.kineto import read_trace


def __getattr__(name: str) -> Any:
    old = _DEPRECATED.get(name)
    if old is not None:  # not cached: every first use from a new place warns
        mod, attr, instead = old
        warnings.warn(f"perfetto_graph_ann.{name} is deprecated and will be removed in {_REMOVED_IN}: "
                      f"use {instead}", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(f".{mod}", __name__), attr)
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    mod, attr = target if isinstance(target, tuple) else (target, name)
    module = importlib.import_module(f".{mod}", __name__)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


def __dir__():
    return __all__
