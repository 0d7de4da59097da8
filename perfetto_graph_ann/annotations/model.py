"""The annotation model: what capture records per executable-graph node.

Pure data, no torch import: the join, the sidecar loader and the tests use it on
machines without a GPU; capture produces it. Keys follow torch 2.15 and CUPTI: ``(graph id << 32) | node
local id``, where the graph id is the *executable* graph's id (the id a replayed kernel
reports), not the capture (template) graph's.
"""
from __future__ import annotations

import dataclasses
import re
import types
from typing import Any, Callable, Dict, Iterable, Mapping, NamedTuple, Optional, Tuple, TypeVar

__all__ = ["Annotation", "AnnotationSet", "CaptureIdentity", "Dim3", "FIRST_LOGICAL_LANE", "GPU_WORK_NODE_TYPES",
           "GraphRecord", "make_key", "node_type_name", "NODE_TYPES", "NodeRecord", "rekey", "ReplayThread",
           "ReplayWindow", "ScopeInstance", "split_key", "UNANNOTATED_GRAPH"]

Dim3 = Tuple[int, int, int]
#: Annotation values are JSON-like: str, int, float, bool, lists and str-keyed dicts of those.
Annotation = Mapping[str, Any]

#: Node types as recorded (``cudaGraphNodeType`` names without prefix, lower case).
NODE_TYPES = ("kernel", "memcpy", "memset", "host", "graph", "empty", "event_record", "event_wait",
              "mem_alloc", "mem_free", "ext_semas_signal", "ext_semas_wait", "batch_mem_op", "conditional",
              "other")
#: Node types whose replay shows up as GPU work in a profile.
GPU_WORK_NODE_TYPES = frozenset({"kernel", "memcpy", "memset"})
#: The annotation field saying how a compiled kernel's module path is known (capture/compiled_paths.py).
MODULE_ORIGIN = "module origin"
#: First lane id handed out for mark_stream labels and process groups.
FIRST_LOGICAL_LANE = 60

_T = TypeVar("_T")

_NODE_TYPE_NAMES = {
    "kernel": "kernel", "memcpy": "memcpy", "memset": "memset", "host": "host", "graph": "graph",
    "empty": "empty", "waitevent": "event_wait", "eventrecord": "event_record",
    "extsemassignal": "ext_semas_signal", "extsemaswait": "ext_semas_wait",
    "extsemaphoresignal": "ext_semas_signal", "extsemaphorewait": "ext_semas_wait",
    "memalloc": "mem_alloc", "memfree": "mem_free", "batchmemop": "batch_mem_op",
    "conditional": "conditional",
}


def node_type_name(enum_name: str) -> str:
    """``cudaGraphNodeTypeKernel`` / ``CU_GRAPH_NODE_TYPE_WAIT_EVENT`` -> ``kernel`` / ``event_wait``."""
    s = re.sub(r"^(cudaGraphNodeType|CU_GRAPH_NODE_TYPE_)", "", enum_name)
    return _NODE_TYPE_NAMES.get(s.replace("_", "").lower(), "other")


def make_key(graph_id: int, local_id: int) -> int:
    """Pack a node key: ``(graph id << 32) | local id`` (both unsigned 32-bit)."""
    if not (0 <= graph_id < 1 << 32 and 0 <= local_id < 1 << 32):
        raise ValueError(f"graph id {graph_id} / local id {local_id} out of 32-bit range")
    return (graph_id << 32) | local_id


def rekey(exec_id: int, local_id: int) -> int:
    """The key a replayed node reports: ``(exec graph id << 32) | local id``, the local id
    taken from a template key's low 32 bits."""
    return make_key(exec_id, local_id & 0xFFFFFFFF)


def split_key(key: int) -> Tuple[int, int]:
    """Unpack a node key into ``(graph id, local id)``."""
    return key >> 32, key & 0xFFFFFFFF


@dataclasses.dataclass(frozen=True)
class NodeRecord:
    """One node of an executable graph, with its merged annotation and calibration."""

    key: int  #: (exec graph id << 32) | local id
    type: str = "kernel"  #: one of NODE_TYPES
    kernel: Optional[str] = None  #: function name (mangled from cuFuncGetName, or demangled)
    grid: Optional[Dim3] = None
    block: Optional[Dim3] = None
    annotation: Annotation = dataclasses.field(default_factory=dict)  #: merged fields of every enclosing scope ({} = none)
    stream: Optional[int] = None  #: calibration: CUDA stream this node ran on in one replay
    ordinal: Optional[int] = None  #: calibration: its position on that stream within one replay
    #: ids of the :attr:`GraphRecord.scopes` instances around this node, outermost first
    scopes: Tuple[int, ...] = ()

    @property
    def graph_id(self) -> int:
        return self.key >> 32

    @property
    def local_id(self) -> int:
        return self.key & 0xFFFFFFFF

    @property
    def lane(self) -> Optional[int]:
        """The display lane the annotation asks for (its ``stream`` field), if any."""
        s = self.annotation.get("stream")
        return s if isinstance(s, int) and not isinstance(s, bool) else None


@dataclasses.dataclass(frozen=True)
class ScopeInstance:
    """One scope block of one capture (a ``mark_kernels``): its own fields, unmerged, and
    the innermost block around it. See :mod:`.scope_instances`."""

    id: int  #: unique within its graph
    fields: Annotation
    parent: Optional[int] = None  #: id of the enclosing instance; None at top level


class GraphEdge(NamedTuple):
    """One dependency edge of a graph, in node-local-id space (``cuGraphGetEdges``).

    ``type`` and ``from_port`` are the driver's ``CUgraphEdgeData`` fields (CUDA >= 12.3):
    type 0 (``CU_GRAPH_DEPENDENCY_TYPE_DEFAULT``) with port 0 is a full dependency (``dst``
    starts after ``src`` completes); type 1 is programmatic (``dst`` may start early).
    """

    src: int  #: local id of the node depended on
    dst: int  #: local id of the dependent node
    type: int = 0
    from_port: int = 0


@dataclasses.dataclass(frozen=True)
class GraphRecord:
    """One executable graph (one instantiation) and its nodes."""

    exec_id: int  #: executable graph id: the high 32 bits of every node key
    nodes: Tuple[NodeRecord, ...]
    template_id: Optional[int] = None  #: capture (template) graph id, for reference
    device: Optional[int] = None
    #: Labels of the lanes this graph's nodes were put on by ``mark_stream`` or a process
    #: group during its own capture (lane id -> label). ``None`` = not recorded (sidecars
    #: written before per-graph lanes, hand-built sets): readers then use
    #: :attr:`AnnotationSet.lanes`. A label belongs to the graph, not the process: a lane id
    #: reused by another graph (an explicit ``{"stream": 61}``) does not inherit it.
    lanes: Optional[Mapping[int, str]] = None
    #: The user's name for the graph (``pga.graph(g, name="decode bs=16")``); None: shown
    #: as ``graph <exec_id>`` (see :attr:`display_name`).
    name: Optional[str] = None
    #: Why this graph has no calibration table (e.g. every replay before export ran under
    #: torch.profiler, CUPTI busy); None when calibrated or not applicable. The join report
    #: prints it when the graph's kernels fall back to structural matching.
    calibration_note: Optional[str] = None
    #: The capture's named scope blocks (each node lists those around it in
    #: :attr:`NodeRecord.scopes`). None: not recorded (sidecars before scope tables,
    #: hand-built sets): scope ranges are then derived from the merged annotations.
    scopes: Optional[Tuple[ScopeInstance, ...]] = None
    #: The graph's dependency edges as captured, between node local ids (sidecar version 4).
    #: None: not recorded (older sidecars, capture records, hand-built sets): the critical
    #: path then falls back to stream order. ``()``: recorded, the graph has no edge.
    edges: Optional[Tuple[GraphEdge, ...]] = None

    def derived(self, build: Callable[["GraphRecord"], _T]) -> _T:
        """``build(self)``, computed once for this record and kept on it.

        A record never changes once built (a graph instantiated again gets a new one), so what
        the join derives from a graph alone (its node counts, scopes, calibration table, the
        predecessors on its edges) holds for every trace joined against it: a process that
        exports each profiling cycle (``trace_handler``) builds it once, not once a cycle. The
        value goes with the record; ``build`` must read nothing but the record. A ``build``
        that raises keeps nothing (it runs again on the next call).
        """
        memo = self.__dict__.get("_derived")
        if memo is None:  # not a field: eq, hash, repr and dataclasses.replace ignore it
            memo = self.__dict__.setdefault("_derived", {})
        try:
            return memo[build]
        except KeyError:
            value = memo[build] = build(self)
            return value

    @property
    def display_name(self) -> str:
        """``name`` when the user gave one, else ``graph <exec_id>``."""
        return self.name if self.name is not None else f"graph {self.exec_id}"

    @property
    def calibrated(self) -> bool:
        return any(n.stream is not None and n.ordinal is not None for n in self.nodes)


def _nodes_by_key(g: GraphRecord) -> Dict[int, NodeRecord]:
    return {n.key: n for n in g.nodes}


@dataclasses.dataclass(frozen=True)
class CaptureIdentity:
    """Where the graphs of a sidecar were captured: the process, its host and its devices.

    Every field may be None / empty (not known where it was recorded). The join compares
    the fields the trace also records (pid, device names by index, CUDA driver version)
    and refuses a sidecar from another process; the rest is for people reading the file.
    """

    host: Optional[str] = None  #: host name (``socket.gethostname()``)
    pid: Optional[int] = None  #: process id as the process itself sees it (``os.getpid()``)
    #: Process start, Unix time in ns (Linux: boot time + ``/proc/self/stat`` start ticks, so
    #: accurate to about a second); with ``host`` and ``pid`` it tells a reused pid apart.
    process_start_ns: Optional[int] = None
    devices: Mapping[int, str] = dataclasses.field(default_factory=dict)  #: CUDA device index -> UUID ("GPU-...")
    device_names: Mapping[int, str] = dataclasses.field(default_factory=dict)  #: CUDA device index -> name ("NVIDIA H200")
    torch_version: Optional[str] = None  #: ``torch.__version__``
    driver_version: Optional[str] = None  #: NVIDIA driver release as NVML reports it, e.g. "580.65.06"
    #: CUDA driver API version (``cuDriverGetVersion``, e.g. 13000): what Kineto writes as
    #: ``cuda_driver_version``.
    cuda_driver_version: Optional[int] = None


#: Exec id recorded for a replay of a graph that carries no annotations (captured without
#: this package, or reset): the join leaves its kernels unlabelled.
UNANNOTATED_GRAPH = 0


@dataclasses.dataclass(frozen=True)
class ReplayThread:
    """The graph replays one thread made during one profiler window, in call order.

    ``graphs[i]`` is the executable graph id the i-th call launched
    (:data:`UNANNOTATED_GRAPH` for a graph this package did not annotate). The calls are
    those that may be in the window's trace: the first ``head_uncertain`` and the last
    ``tail_uncertain`` ran while the profiler was starting or stopping, so the trace may or
    may not hold their launches; every other call is in it. See :mod:`..join.launches`.
    """

    ident: int  #: ``threading.get_ident()`` (pthread_self): Kineto's tid without CPU ops (low 32 bits)
    native_id: Optional[int]  #: ``threading.get_native_id()`` (gettid): Kineto's tid with CPU ops
    graphs: Tuple[int, ...]
    head_uncertain: int = 0
    tail_uncertain: int = 0
    #: Unix time (ns) at which each call began, as the process's clock read it (same length as
    #: ``graphs``; empty: not recorded): a sanity check against the trace's launch times.
    starts_ns: Tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class ReplayWindow:
    """One torch.profiler recording span of one process and the replays made during it."""

    pid: Optional[int]  #: the recording process (``os.getpid()``)
    start_ns: int  #: Unix time (ns) when recording started (``_enable_profiler`` returned)
    stop_ns: int  #: Unix time (ns) when recording stopped (``_disable_profiler`` was called)
    threads: Tuple[ReplayThread, ...] = ()


@dataclasses.dataclass(frozen=True)
class AnnotationSet:
    """Everything the join needs from capture: graphs, nodes, lane labels.

    ``lanes`` maps a lane id (60 upward for ``mark_stream`` and process groups) to its
    label, e.g. ``{60: "left_projection", 62: "default_pg (all_reduce)"}``, for every lane
    labelled in the process: the union readers of old sidecars use. Each graph's own
    labels are :attr:`GraphRecord.lanes` (see :meth:`lane_labels`).
    """

    graphs: Tuple[GraphRecord, ...] = ()
    lanes: Mapping[int, str] = dataclasses.field(default_factory=dict)
    backend: Optional[str] = None  #: capture backend that produced the keys
    source: Optional[str] = None  #: file it was loaded from, for messages
    #: Where the graphs were captured (sidecar version 2); None: not recorded (version-1
    #: sidecars, capture records, hand-built sets), so the join cannot check it.
    capture: Optional[CaptureIdentity] = None
    #: Which graph each replay launched, per profiler window (sidecar version 3). None: not
    #: recorded (older sidecars, capture records, hand-built sets): the join then tells
    #: graphs apart by their kernels alone and leaves replays it cannot attribute unlabelled.
    replays: Optional[Tuple[ReplayWindow, ...]] = None

    def nodes_by_key(self) -> Dict[int, NodeRecord]:
        """Every node by its key (a later graph's node wins a key two graphs share). Each
        graph's part is built once per record (:meth:`GraphRecord.derived`): a serving
        engine's dozens of graphs are joined every profiling cycle."""
        out: Dict[int, NodeRecord] = {}
        for g in self.graphs:
            out.update(g.derived(_nodes_by_key))
        return out

    def latest_window(self) -> Optional[ReplayWindow]:
        """The replay record's latest profiler window (the profile being exported); None where
        nothing was recorded."""
        return max(self.replays, key=lambda w: w.stop_ns) if self.replays else None

    def graph(self, exec_id: int) -> Optional[GraphRecord]:
        for g in self.graphs:
            if g.exec_id == exec_id:
                return g
        return None

    def lane_labels(self, graph: GraphRecord) -> Mapping[int, str]:
        """The lane labels that apply to ``graph``'s nodes: its own, else (not recorded) the set's."""
        return graph.lanes if graph.lanes is not None else self.lanes

    @staticmethod
    def merge(sets: Iterable["AnnotationSet"]) -> "AnnotationSet":
        """Union of several sets (e.g. one per sidecar); later lane labels win in ``lanes``.

        A graph without its own labels (old sidecar) gets its own set's ``lanes``, so it is
        never named by another file's labels. ``capture`` is the first set's that has one;
        the join checks each file's own identity (``join(..., sources=)``).
        """
        graphs: list = []
        lanes: Dict[int, str] = {}
        backend = source = capture = None
        replays: Optional[list] = None
        for s in sets:
            if s.replays is not None:
                replays = (replays or []) + [w for w in s.replays if w not in (replays or [])]
            graphs.extend(g if g.lanes is not None else dataclasses.replace(g, lanes=s.lanes) for g in s.graphs)
            lanes.update(s.lanes)
            backend = backend or s.backend
            source = source or s.source
            capture = capture or s.capture
        return AnnotationSet(tuple(graphs), types.MappingProxyType(lanes), backend, source, capture,
                             tuple(replays) if replays is not None else None)
