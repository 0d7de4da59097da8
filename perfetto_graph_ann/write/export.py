"""One call from a live ``torch.profiler.profile`` to an annotated trace file.

    with torch.profiler.profile(...) as prof:
        g.replay()
    perfetto_graph_ann.export(prof, "run.pftrace")          # or "run.json.gz"

The profiler writes its Chrome trace to a temporary file (``export_chrome_trace``, the
only profiler method used, so any object with it works); the trace is joined with the
live annotation registry (or the given annotations) and written as native Perfetto
(``.pftrace``) or annotated Chrome JSON (``.json`` / ``.json.gz``). Importing this module
does not import torch.
"""
from __future__ import annotations

import os
import tempfile
from typing import Union

from ..capture.annotations import AnnotationSet
from ..errors import OutputError, PathLike
from ..join.model import LaneLayout

AnnotationsArg = Union[AnnotationSet, PathLike, None]

_JSON_SUFFIXES = (".json", ".json.gz")


def _annotations(annotations: AnnotationsArg) -> AnnotationSet:
    if annotations is None:
        from ..capture.registry import REGISTRY

        return REGISTRY.snapshot()
    if isinstance(annotations, AnnotationSet):
        return annotations
    from ..capture.sidecar import load_annotations

    return load_annotations(annotations)


def export(prof, out: PathLike, annotations: AnnotationsArg = None, graph_lanes: str = "all") -> LaneLayout:
    """Write ``prof``'s trace to ``out`` with semantic lanes and annotation args; returns the layout.

    ``annotations``: an :class:`AnnotationSet`, a sidecar / capture-record path, or None for
    everything captured so far in this process. ``out`` ending in ``.json`` / ``.json.gz``
    gives annotated Chrome JSON, anything else a ``.pftrace``. The output is written
    atomically; its join report is ``layout.report``.
    """
    from ..join import join
    from ..read.kineto import read_trace

    out = os.fspath(out)
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder):
        raise OutputError(out, f"output folder {folder} does not exist")
    ann = _annotations(annotations)
    with tempfile.TemporaryDirectory(prefix="pga-export-") as tmp:
        src = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(src)
        trace = read_trace(src)
        layout = join(trace, ann, graph_lanes=graph_lanes)
        if out.endswith(_JSON_SUFFIXES):
            from .chrome_json import write_chrome_json

            write_chrome_json(trace, out, layout)
        else:
            from .convert import convert

            convert(trace, out, layout=layout)
    return layout
