"""Save and load annotations: the versioned sidecar (``protos/perfetto_graph_ann/sidecar.proto``).

Two forms of the same content: binary protobuf (default; :mod:`.sidecar_proto`) and JSON
for humans (a path ending in ``.json`` / ``.json.gz``; :mod:`.sidecar_json`).
``load_annotations`` tells them apart by content, and also reads the fixtures' capture
records (``*.capture.json``, :mod:`.capture_record`). Nothing is pickled or evaluated;
every problem is a :class:`~perfetto_graph_ann.errors.SidecarError` whose message starts
with the path.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Iterable, Optional

from .. import formats
from ..errors import EMPTY_FILE, PathLike, SidecarError
from ..util.atomic import atomic_write_bytes
from ..util.collector import paused_gc
from .capture_record import capture_record_to_annotations
from .model import AnnotationSet
from .schema import parse_json_bytes
from .sidecar_json import from_json, to_json
from .sidecar_proto import from_bytes, to_bytes


# ---- public API ----------------------------------------------------------------------

__all__ = ["load_annotation_files", "load_annotations", "merge_annotation_sets", "save_annotations"]


def save_annotations(path: PathLike, annotations: AnnotationSet, format: Optional[str] = None) -> str:
    """Write ``annotations`` to ``path``, atomically.

    ``format``: ``"binary"`` or ``"json"``; default from the name (``.json`` / ``.json.gz``
    in any case is JSON, as everywhere else in the package; anything else binary). A ``.gz`` suffix gzips. Returns the path.
    (``perfetto_graph_ann.save_annotations`` defaults ``annotations`` to what this process captured.)
    """
    path = os.fspath(path)
    fmt = format or ("json" if formats.is_json_name(path) else "binary")
    if fmt == "json":
        data = json.dumps(to_json(annotations), indent=1, ensure_ascii=False).encode() + b"\n"
    elif fmt == "binary":
        data = to_bytes(annotations)
    else:
        raise ValueError(f"format must be 'binary' or 'json', got {format!r}")
    atomic_write_bytes(path, data)
    return path


def load_annotations(path: PathLike) -> AnnotationSet:
    """Read a binary sidecar, a JSON sidecar, or a fixture capture record (``*.capture.json``)."""
    path = os.fspath(path)
    data = formats.strip_bom(formats.read_bytes(path, SidecarError))
    if not data.strip():
        raise SidecarError(path, EMPTY_FILE)
    form = formats.annotation_form(data)
    if form is None:
        raise SidecarError(path, "not an annotation sidecar (neither the binary form nor JSON)")
    with paused_gc():  # a record a node: thousands a graph, none of them cyclic
        if form == "json":
            doc = parse_json_bytes(data, path)
            if formats.is_capture_record(doc):
                return capture_record_to_annotations(doc, path)
            return from_json(doc, path)
        return from_bytes(data, path)


def load_annotation_files(paths: Iterable[PathLike]) -> AnnotationSet:
    """The annotations of several files (sidecars or capture records), merged in the given
    order (:meth:`AnnotationSet.merge`); an empty set for no files.

    A graph recorded identically in two files (one file passed twice, a copy, its sidecar
    next to its capture record) is kept once: as two graphs every match would tie with its
    own duplicate and be flagged ambiguous. Graphs that differ in anything stay apart.
    """
    return merge_annotation_sets([load_annotations(p) for p in paths])


def merge_annotation_sets(sets: Iterable[AnnotationSet]) -> AnnotationSet:
    """:meth:`AnnotationSet.merge`, keeping a graph recorded identically in several sets once
    (see :func:`load_annotation_files`); an empty set for no sets."""
    sets = list(sets)
    if not sets:
        return AnnotationSet()
    merged = AnnotationSet.merge(sets)
    graphs: list = []
    for g in merged.graphs:
        if g not in graphs:
            graphs.append(g)
    if len(graphs) == len(merged.graphs):
        return merged
    return dataclasses.replace(merged, graphs=tuple(graphs))
