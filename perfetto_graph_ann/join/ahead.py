"""What the join derives from each graph alone, built before the trace is there.

The join keeps, per graph record (:meth:`~..annotations.model.GraphRecord.derived`), values that
depend on the graph only: the loose node counts of the structural fit, the calibration table,
the scope info of the projection, and the predecessors on its edges for the critical path. A
process exporting each cycle builds them once; a conversion worker loads its records afresh and
would build them after torch's JSON, on the caller's wait. :func:`prepare_graphs` builds them
ahead: the worker calls it while torch is still writing the profile it follows.
"""
from __future__ import annotations

from typing import Callable, List

from ..annotations.model import AnnotationSet, GraphRecord
from . import calibrated, critical_path, projection
from .match import GraphFit

__all__ = ["prepare_graphs"]

#: The per-graph values the join asks for, each built as the join builds it.
_BUILDS: List[Callable[[GraphRecord], object]] = [
    GraphFit._node_counts, calibrated._table, lambda g: g.derived(projection._graph_info)]


def prepare_graphs(annotations: AnnotationSet) -> int:
    """Build the join's per-graph values for the graphs the latest profiler window replayed (by
    the replay record; every graph where there is none); returns how many graphs. A value whose
    build fails is left unbuilt: the join builds it again and meets the failure where it always
    does (a graph with a cycle in its edges, for one)."""
    graphs = annotations.graphs
    window = annotations.latest_window()
    if window is not None:
        replayed = {e for t in window.threads for e in t.graphs}
        graphs = tuple(g for g in graphs if g.exec_id in replayed)
    for g in graphs:
        for build in _BUILDS:
            try:
                build(g)
            except Exception:  # noqa: BLE001: built again, and raised or counted, by the join itself
                pass
        if g.edges is not None:
            try:
                g.derived(critical_path.work_predecessors)
            except Exception:  # noqa: BLE001: as above (critical_path.CycleError)
                pass
    return len(graphs)
