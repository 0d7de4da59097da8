"""perfetto_graph_ann: CUDA-graph annotations for PyTorch profiles, natively in Perfetto.

Flow: ``capture`` (mark regions while capturing a CUDA graph) -> ``read`` (torch.profiler
JSON, exact) -> ``join`` (replayed kernels to graph nodes) -> ``write`` (Perfetto
TrackEvent protobuf, or annotated Chrome JSON) -> ``query`` (trace processor + the
``graph_ann`` PerfettoSQL package, DataFrames).

Capture needs torch and a GPU; everything else runs anywhere. Public names are imported
lazily so ``import perfetto_graph_ann`` never imports torch.
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it (relative to this package), or (module, attribute)
_LAZY = {
    # capture
    "graph": "capture.api",
    "mark_kernels": "capture.api",
    "mark_stream": "capture.api",
    "calibrate": "capture.api",
    "annotate_collective": "capture.collectives",
    "get_stream_for_pg": "capture.collectives",
    "is_available": "capture.backends",
    "backend_info": "capture.backends",
    "get_kernel_annotations": "capture.registry",
    "save_annotations": "capture.recorded",
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
    "EngineConfig": "query.engine.config",
}

__all__ = sorted(_LAZY) + ["__version__"]


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
