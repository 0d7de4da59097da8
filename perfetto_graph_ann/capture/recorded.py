"""What this process captured, as an :class:`AnnotationSet`, and saving it.

The capture side of the sidecar: :func:`recorded_annotations` snapshots the live registry
(or torch's own on torch's backend); :func:`save_annotations` is the public
``perfetto_graph_ann.save_annotations``, which saves that snapshot unless given a set. The
file format itself lives in :mod:`perfetto_graph_ann.annotations.files`.
"""
from __future__ import annotations

import types
from typing import Any, Dict, List, Optional

from ..annotations import files
from ..annotations.model import AnnotationSet, GraphRecord, NodeRecord
from ..errors import PathLike

__all__ = ["recorded_annotations", "save_annotations"]


def save_annotations(path: PathLike, annotations: Optional[AnnotationSet] = None, format: Optional[str] = None) -> str:
    """Write the annotations recorded so far (or ``annotations``) to ``path``, atomically.

    ``format``: ``"binary"`` or ``"json"``; default from the name (``.json`` / ``.json.gz``
    in any case is JSON, as everywhere else in the package; anything else binary). A ``.gz`` suffix gzips. Returns the path.
    """
    return files.save_annotations(path, recorded_annotations() if annotations is None else annotations, format)


def recorded_annotations() -> AnnotationSet:
    """Everything captured so far in this process: our registry, or torch's own on torch's backend."""
    from . import backends
    from .registry import REGISTRY

    if backends.selected_name() == backends.TORCH:  # torch's own registry: keys and fields only
        from . import torch_native

        ann = torch_native.call("get_kernel_annotations")
        by_graph: Dict[int, List[NodeRecord]] = {}
        for key, vals in dict(ann).items():
            merged: Dict[str, Any] = {}
            for v in vals:
                merged.update(v)
            by_graph.setdefault(key >> 32, []).append(NodeRecord(key=key, annotation=merged))
        graphs = tuple(GraphRecord(g, tuple(sorted(ns, key=lambda n: n.key))) for g, ns in sorted(by_graph.items()))
        from .identity import capture_identity

        return AnnotationSet(graphs, types.MappingProxyType(REGISTRY.lanes.snapshot()), backends.TORCH,
                             capture=capture_identity())
    return REGISTRY.snapshot()
