"""One capture, from ``graph(...)``'s entry to a registered :class:`GraphRecord`. Torch-free.

Lifecycle (``api.graph`` drives it; tests drive it with a fake backend):

1. ``start()`` right after capture began: finds the graph under capture on the capture
   stream; scopes count that graph's nodes (by graph handle, so a scope on a side stream
   that has not joined yet still sees the nodes it adds once it joins).
2. ``finish_capture()`` just before capture ends: freezes the scopes and keeps what the node
   table (type, local id, kernel, grid, block) needs, because torch destroys the template at
   instantiation unless ``keep_graph=True``: on the compiled path the table's raw rows, read
   in C (``backend.raw_table``: a handful of driver calls a node, cheaper than a copy);
   elsewhere a copy of the template (``cuGraphClone``, which keeps every node's local id and
   the listing order), destroyed once read. Either is decoded on first use (the registry,
   the sidecar, calibration), off the capture's critical path. Where the backend can do
   neither (e.g. a graph with memory-allocation nodes cannot be copied) the table is read
   right away.
3. ``bind_exec(exec handle)`` after each instantiation: rekeys to the executable graph and
   registers (replacing the graph's previous entry). The executable graph's id is asked of
   the backend on first use (calibration, the registry, the sidecar), not at the end of the
   capture, to keep a driver call out of the capture's critical path.
4. ``apply_calibration(table)``: adds (stream, ordinal) per node. Until then
   :attr:`calibration_note` says why the record has no calibration table (pending until
   the graph's first eligible replay, deferred by a profiler, off, failed); the record
   carries it for the join's report.

``PERFETTO_GRAPH_ANN_VERIFY_SCOPES=1`` (or ``verify=True``) lists the graph at every scope
edge and reads the template's table right away too, and checks that the scope ranges and
the copy agree with them (raising :class:`CaptureError` if not): the GPU tests run so.

Scope edges on large graphs: the node count walks the whole graph, so from
``markers_from`` nodes on (default 512, ``PERFETTO_GRAPH_ANN_MARKERS_FROM``; ``off`` never)
an edge adds an empty *marker* node instead and reads its local id in constant time: the
same position, since ids are given in creation order. Markers stay in the graph (the
driver cannot delete nodes during capture), do nothing on replay and are left out of the
node table, the registry and the sidecar. Why and what it costs: docs/design.md
("Capture"), BENCHMARKS.md ("capture"). Cheaper still, where CUPTI allows it: a counter bumped
by CUPTI's node-created callback (:mod:`.nodewatch`), read at each edge with no driver call
and checked against the driver's count at the capture's end.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import threading
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from .. import settings
from ..errors import CaptureError
from ..annotations.model import GraphEdge, GraphRecord
from . import fastpath
from . import nodewatch
from .backends import CaptureBackend
from .registry import REGISTRY, Registry
from .resolve import NodeInfo, resolve_graph, with_calibration
from ..annotations.model import ScopeInstance
from ..annotations.scope_instances import from_ranges
from .scopes import ScopeRecord, ScopeRecorder, merge_scopes

__all__ = ["CaptureSession", "current", "DEFAULT_MARKERS_FROM", "lane_scope", "MARKERS_ENV", "markers_from_env", "pop",
           "push", "VERIFY_ENV", "verify_from_env"]

_owner_ids = itertools.count(1)
#: environment switch for :class:`CaptureSession`'s ``verify``
VERIFY_ENV = settings.VERIFY_SCOPES.name
#: environment setting for :class:`CaptureSession`'s ``markers_from``
MARKERS_ENV = settings.MARKERS_FROM.name
#: graph size from which a marker node is cheaper than a count (the count grows with the
#: graph, a marker's cost does not: BENCHMARKS.md, "capture")
DEFAULT_MARKERS_FROM: int = settings.MARKERS_FROM.default  # type: ignore[assignment]


def verify_from_env() -> bool:
    """``PERFETTO_GRAPH_ANN_VERIFY_SCOPES`` (a switch; default off)."""
    return settings.switch(settings.VERIFY_SCOPES, fastpath.getenv)


def markers_from_env() -> Optional[int]:
    """``PERFETTO_GRAPH_ANN_MARKERS_FROM``: a node count, or ``off``; unset: the default."""
    return settings.count_or_off(settings.MARKERS_FROM, fastpath.getenv)


class CaptureSession:
    def __init__(self, backend: CaptureBackend, capture_stream: int, registry: Registry = REGISTRY,
                 owner: Any = None, device: Optional[int] = None, verify: Optional[bool] = None,
                 markers_from: Any = "env", name: Optional[str] = None, node_watch: Optional[bool] = None):
        self.backend = backend
        self.capture_stream = capture_stream
        self.registry = registry
        self.owner = owner if owner is not None else next(_owner_ids)
        self.device = device
        self.name = name  #: display name of the graph (``graph(g, name=...)``), None: ``graph <id>``
        self.graph: Optional[int] = None
        self.verify = verify_from_env() if verify is None else verify
        #: graph size from which scope edges add marker nodes (None: always count)
        self.markers_from: Optional[int] = markers_from_env() if markers_from == "env" else markers_from
        #: whether edges may read CUPTI's node-created count (:mod:`.nodewatch`)
        self.node_watch = node_watch if node_watch is not None else nodewatch.enabled_from_env()
        self._watch: Optional[Tuple[int, int]] = None  # (counter slot, WATCH token) while edges read it
        self._watch_pending = False  # the watch starts at the first edge (a capture with none never subscribes)
        #: held while the watch is set up or given up: a profiler starting in another thread
        #: while this capture subscribes waits until it can take the subscription back
        self._watch_lock = threading.Lock()
        self._markers: List[int] = []  # listing positions of the marker nodes added
        self._edge_hint = 0  # the last edge's position: picks count or marker for the next
        # the compiled recorder where built (scope edges in C), unless every edge is verified
        self._fast = not self.verify and fastpath.module() is not None
        self.recorder = fastpath.FastScopeRecorder(self._count) if self._fast else \
            ScopeRecorder(self._count, lister=self._list if self.verify else None)
        self.template_id: Optional[int] = None
        self._finished = False
        self._nodes: Optional[List[NodeInfo]] = None
        self._annotations: Dict[int, Dict[str, Any]] = {}
        self._scopes: Optional[Tuple[Tuple[ScopeInstance, ...], Dict[int, Tuple[int, ...]]]] = None
        self._copy: Optional[int] = None  # copy of the template graph, table not read yet
        self._raw: Any = None  # the template's table as read in C at the end, not decoded yet
        #: the dependency edges of the graph whose table is read next, as the backend read them
        #: (``raw_edges``: undecoded); None: not read (a backend without an edge reader, or it failed)
        self._raw_edges: Any = None
        self._edges: Optional[Tuple[GraphEdge, ...]] = None  # in local ids, set with the table
        self._expected: Optional[List[Tuple]] = None  # verify: the template's own table
        self._table_error: Optional[CaptureError] = None  # why the copy's table could not be read
        self._table_lock = threading.RLock()
        #: lane id -> label given during this capture (first label wins), see label_lane
        self.lane_labels: Dict[int, str] = {}
        self._lane_lock = threading.Lock()
        self._exec_handle: Optional[int] = None  # bound executable graph; its id is read on first use
        self._exec_id: Optional[int] = None
        self._record: Optional[GraphRecord] = None
        self._calibration: Optional[Mapping[int, Tuple[int, int]]] = None
        #: why the bound executable graph has no calibration table (None once it has one)
        self.calibration_note: Optional[str] = None
        #: True while the graph's next eligible replay is to be recorded (``api`` wraps it)
        self.calibration_pending = False
        #: compiled regions of this capture (:class:`.compiled.Regions`, set while it runs)
        self.compiled: Any = None
        #: which module levels compiled regions scope (a ``ModuleScopes.wants``; None: all)
        self.module_filter: Any = None

    def _count(self) -> Optional[int]:
        if self.graph is None:
            return None
        if self._watch_pending:
            self._start_watch()
        watch = self._watch
        if watch is not None:
            return fastpath.module().watch_count(watch[0])
        return self._edge()

    def _edge(self) -> int:
        """The listing position of the next node: a count while the graph is small, else a marker."""
        start = self.markers_from
        if start is not None and self._edge_hint >= start:
            pos = self.backend.add_marker(self.graph)
            if pos is not None:
                self._markers.append(pos)
                self._edge_hint = pos + 1
                return pos
            self.markers_from = None  # the backend cannot: count from now on
        n = self.backend.node_count(self.graph)
        self._edge_hint = n
        return n

    def _marker_edge(self) -> int:
        """The compiled recorder's edge once its count reached ``markers_from``."""
        self._edge_hint = max(self._edge_hint, self.markers_from or 0)
        return self._edge()

    def _list(self) -> Optional[List[int]]:
        if self.graph is None:
            return None
        return self.backend.list_nodes(self.graph)

    def start(self, capture_stream: Optional[int] = None) -> None:
        """Find the graph under capture on ``capture_stream`` (default: the one given at init)."""
        if capture_stream is not None:
            self.capture_stream = capture_stream
        self.graph = self.backend.capture_graph(self.capture_stream)
        if self.graph is None:
            raise CaptureError(f"stream {self.capture_stream:#x} is not capturing; graph() must wrap an active capture")
        count_fn = self.backend.count_function() if self._fast else None
        if count_fn is not None:
            start = self.markers_from
            marker_fns = self.backend.marker_functions() if start is not None else None
            if marker_fns is not None:  # markers added from C too, their positions into self._markers
                self.recorder.set_fast(count_fn, self.graph, start, self._marker_edge, *marker_fns, self._markers)
            else:
                self.recorder.set_fast(count_fn, self.graph, -1 if start is None else start, self._marker_edge)
        else:
            self.recorder.set_counter(self._count)
        self._arm_watch()

    @property
    def edge_source(self) -> str:
        """Where scope edges are positioned now: ``node callback`` (CUPTI's count) or ``driver``."""
        return "node callback" if self._watch is not None else "driver"

    def _arm_watch(self) -> None:
        """Start the watch at the first scope edge: a capture that opens no scope (``instrument()``
        without module scopes) never subscribes to CUPTI, whose first subscription in a process
        costs ~20 ms on the H200."""
        if not self.node_watch or fastpath.module() is None:
            return
        self._watch_pending = True
        if self._fast:
            self.recorder.set_watch_starter(self._start_watch)

    def _start_watch(self) -> None:
        """Edges read CUPTI's node-created count from now on, where the backend and CUPTI allow."""
        fast = fastpath.module()
        with self._watch_lock:
            if not self._watch_pending:
                return
            self._watch_pending = False
            fns = self.backend.node_watch_functions() if self.node_watch and fast is not None else None
            if fns is None:
                return
            token = nodewatch.WATCH.acquire(fns, self.stop_watch)
            if token is None:
                return
            try:
                slot = fast.watch_add(self.graph, self.backend.node_count(self.graph))
            except BaseException:
                nodewatch.WATCH.release(token)
                raise
            if slot < 0:  # every slot taken by captures in flight
                nodewatch.WATCH.release(token)
                return
            self._watch = (slot, token)
            if self._fast:
                self.recorder.set_watch(slot)

    def stop_watch(self) -> Optional[int]:
        """Edges ask the driver from now on (the same positions); the count the callback reached,
        or None where edges did not read one. Idempotent; the subscription ends with the last
        capture holding it. Also how a capture gives the count up to a starting profiler."""
        with self._watch_lock:
            if self._watch_pending:  # never started: it will not now
                self._watch_pending = False
                if self._fast:
                    self.recorder.set_watch_starter(None)
            watch, self._watch = self._watch, None
            if watch is None:
                return None
            fast = fastpath.module()
            n = fast.watch_count(watch[0])
            if self._fast:
                self.recorder.set_watch(-1)
            fast.watch_remove(watch[0])
            nodewatch.WATCH.release(watch[1])
            return n

    def label_lane(self, lane: int, label: str) -> None:
        """Record that this capture labelled ``lane`` (``mark_stream``, a process group).

        The label goes into this graph's record only (for lanes its nodes end up on), so a
        lane id another graph reuses never shows this graph's label. The first label this
        capture gives a lane is kept, as the process-wide allocator does.
        """
        if not self.recorder.active:
            return
        with self._lane_lock:
            self.lane_labels.setdefault(lane, label)

    def lane_label(self, lane: Any) -> Optional[str]:
        """The label this capture gave ``lane``, if any."""
        with self._lane_lock:
            return self.lane_labels.get(lane)

    def finish_capture(self) -> None:
        if self.graph is None:
            return
        watched = self.stop_watch()
        nodewatch.WATCH.idle(self.backend.cupti_detach_functions())
        if watched is not None:
            n = self.backend.node_count(self.graph)
            if n != watched:
                raise CaptureError(f"CUPTI's node-created callback counted {watched} nodes but the graph has {n}: "
                                   "its scope ranges cannot be trusted (set PERFETTO_GRAPH_ANN_NODE_WATCH=0 "
                                   "and please report this driver)")
        self.template_id = self.backend.graph_id(self.graph)
        self.recorder.active = False  # closed scopes are final now; read with the table
        self._finished = True
        self._raw_edges = self._read_edges(self.graph)
        try:
            raw = self.backend.raw_table(self.graph)
        except CaptureError:
            if self.verify:
                raise
            raw = None  # the copy below gives the same table another way
        if raw is not None and not self.verify:  # the rows, read in C: decoded on first use
            self._raw = raw
            return
        copy = self.backend.clone_graph(self.graph)
        if self.verify or copy is None:
            self._read_table(self.graph)
        if raw is not None and [_table_row(n) for n in self.backend.decode_table(raw)] != self._expected:
            raise CaptureError("the node table read in C differs from the one read through ctypes "
                               "(please report this driver)")
        if copy is not None:
            if self.verify:  # read again from the copy and compared with these rows (_expected)
                self._nodes = None
            self._copy = copy

    def _read_edges(self, graph: int) -> Any:
        """The graph's edges as the backend reads them (a count and a read: two driver calls a
        graph; decoded with the table, on first use), None when it cannot: the record then has
        no edges (the critical path falls back to stream order)."""
        try:
            return self.backend.raw_edges(graph)
        except CaptureError:
            if self.verify:
                raise
            return None

    def _read_table(self, graph: int) -> None:
        self._raw_edges = self._read_edges(graph)  # the same graph's handles as its table's
        self._set_table(self.backend.node_infos(graph))
        nodewatch.WATCH.idle(self.backend.cupti_detach_functions())  # its ids may have initialised CUPTI

    def _set_table(self, nodes: List[NodeInfo]) -> None:
        if len({n.local_id for n in nodes}) != len(nodes):
            raise CaptureError("two nodes of the captured graph report the same local id")
        scopes = list(self.recorder.records())
        if self.compiled is not None:
            if self.compiled.regions:
                first = max((r.seq for r in scopes), default=-1) + 1
                scopes += [ScopeRecord(*r) for r in self.compiled.scopes(nodes, scopes, first, self.module_filter)]
            # the watched extern calls' own scopes: bookkeeping, even where no region used them
            scopes = [r for r in scopes if not self.compiled.internal(r.fields)]
        end = max((r.end for r in scopes), default=0)
        if end > len(nodes):
            raise CaptureError(f"a scope ends at node {end} but the captured graph has {len(nodes)} nodes")
        rows = [_table_row(n) for n in nodes] if self.verify else None
        if self._expected is not None and rows != self._expected:
            raise CaptureError("the copy of the captured graph lists its nodes differently from the graph")
        self._expected = rows
        listing = [n.handle for n in nodes]
        annotations = merge_scopes(scopes, listing)
        self._scopes = from_ranges(scopes, listing)
        markers = set(self._markers)
        for pos in markers:
            if pos >= len(nodes) or nodes[pos].type != "empty" or nodes[pos].local_id != pos:
                raise CaptureError(f"marker node {pos} is not an empty node of the captured graph: scope "
                                   "ranges would attribute the wrong nodes (please report this driver)")
            annotations.pop(nodes[pos].handle, None)
        self._annotations = annotations
        self._nodes = [n for i, n in enumerate(nodes) if i not in markers] if markers else nodes
        try:
            raw_edges = self.backend.decode_edges(self._raw_edges) if self._raw_edges is not None else None
            self._edges = _local_edges(raw_edges, nodes, {nodes[pos].local_id for pos in markers})
        except CaptureError:
            if self.verify:
                raise
            self._edges = None  # edges that do not fit the table: not recorded (never a guessed edge)

    def _ensure_table(self) -> None:
        with self._table_lock:
            if self._table_error is not None:  # the copy is gone: every later read says why
                raise self._table_error
            if self._nodes is None and self._raw is not None:
                raw, self._raw = self._raw, None
                try:
                    self._set_table(self.backend.decode_table(raw))
                except CaptureError as e:
                    self._table_error = e
                    raise
            if self._nodes is None and self._copy is not None:
                copy, self._copy = self._copy, None
                try:
                    self._read_table(copy)
                except CaptureError as e:
                    self._table_error = e
                    raise
                finally:
                    self.backend.destroy_graph(copy)

    @property
    def nodes(self) -> Optional[List[NodeInfo]]:
        """The template graph's node table, in creation order (None before finish_capture)."""
        self._ensure_table()
        return self._nodes

    @property
    def annotations(self) -> Dict[int, Dict[str, Any]]:
        """node handle (in :attr:`nodes`) -> merged scope fields."""
        self._ensure_table()
        return self._annotations

    @property
    def record(self) -> Optional[GraphRecord]:
        """The executable graph's record (built on first use), None before instantiation."""
        if self._record is None and self.exec_id is not None:
            with self._table_lock:  # concurrent first readers: one builds, the others get its record
                if self._record is None and self.exec_id is not None:
                    with self._lane_lock:
                        labels = dict(self.lane_labels)
                    rec = resolve_graph(self.nodes or [], self.annotations, self.exec_id, self.template_id,
                                        self.device, lane_labels=labels, name=self.name, scopes=self._scopes)
                    rec = with_calibration(rec, self._calibration) if self._calibration else rec
                    if self._edges is not None:
                        rec = dataclasses.replace(rec, edges=self._edges)
                    if self.calibration_note is not None and not self._calibration:
                        rec = dataclasses.replace(rec, calibration_note=self.calibration_note)
                    self._record = rec
        return self._record

    @property
    def exec_id(self) -> Optional[int]:
        """The bound executable graph's id (None before ``bind_exec`` or after ``drop``).

        Read from the backend on first use: the handle stays valid while it is bound, as every
        way its executable graph goes away (reset, re-instantiation, the graph object being
        collected) goes through ``drop`` or ``bind_exec`` first.
        """
        eid = self._exec_id
        if eid is None and self._exec_handle is not None:
            with self._table_lock:
                if self._exec_id is None and self._exec_handle is not None:
                    self._exec_id = self.backend.exec_id(self._exec_handle)
                    nodewatch.WATCH.idle(self.backend.cupti_detach_functions())  # as _read_table's ids
                eid = self._exec_id
        return eid

    def bind_exec(self, graph_exec: int) -> None:
        """Rekey to the executable graph ``graph_exec`` and register.

        The node records and the executable graph's id are built lazily (first read of
        :attr:`record`, :attr:`exec_id` or the registry).
        """
        if not self._finished:
            raise CaptureError("bind_exec before finish_capture: the capture was not finished")
        with self._table_lock:  # never a record half built for the previous executable graph
            self._exec_handle, self._exec_id, self._record, self._calibration = graph_exec, None, None, None
            self.calibration_pending = False
        self.registry.put(self.owner, lambda: self.record)

    def set_calibration_note(self, note: Optional[str], pending: Optional[bool] = None) -> None:
        """Say why the graph has no calibration table (and whether a replay will still record one).

        The record is rebuilt on its next read only when the note changed.
        """
        with self._table_lock:
            if pending is not None:
                self.calibration_pending = pending
            if note == self.calibration_note:
                return
            self.calibration_note, self._record = note, None
        self.registry.put(self.owner, lambda: self.record)

    def apply_calibration(self, table: Mapping[int, Tuple[int, int]]) -> None:
        """Store the (stream, ordinal) table; the record is rebuilt on its next read."""
        if self.exec_id is None:
            raise CaptureError("calibration before the graph was instantiated")
        with self._table_lock:
            self._calibration, self._record = dict(table), None
            self.calibration_note, self.calibration_pending = None, False
        self.registry.put(self.owner, lambda: self.record)

    def drop(self) -> None:
        """The graph was reset: forget its entry and free the template copy if unread."""
        with self._table_lock:
            self._exec_handle, self._exec_id, self._record = None, None, None
            copy, self._copy = self._copy, None
            self._raw = None
        self.registry.drop(self.owner)
        if copy is not None:
            self.backend.destroy_graph(copy)


def _local_edges(raw: Optional[List[Tuple[int, int, int, int]]], nodes: List[NodeInfo],
                 markers: set) -> Optional[Tuple[GraphEdge, ...]]:
    """The backend's edges (node handles) in local ids, sorted; an edge naming a node the table
    lacks is an error. Marker nodes are left out of the table, so edges through one (none are
    expected: markers are added without dependencies) are replaced by edges around it."""
    if raw is None:
        return None
    local = {n.handle: n.local_id for n in nodes}
    edges = []
    for src, dst, typ, port in raw:
        if src not in local or dst not in local:
            raise CaptureError("the captured graph's edges name a node its node table lacks (please report this driver)")
        edges.append(GraphEdge(local[src], local[dst], typ, port))
    if markers:
        into: Dict[int, List[GraphEdge]] = {}
        for e in edges:
            if e.dst in markers:
                into.setdefault(e.dst, []).append(e)
        kept = []
        for e in edges:
            if e.dst in markers:
                continue
            if e.src in markers:  # a marker's predecessors stand for it (one level: markers do not chain)
                kept.extend(GraphEdge(p.src, e.dst, e.type, e.from_port) for p in into.get(e.src, ())
                            if p.src not in markers)
            else:
                kept.append(e)
        edges = kept
    return tuple(sorted(set(edges)))


def _table_row(n: NodeInfo) -> Tuple:
    """A node table row without its handle (handles differ between a graph and its copy)."""
    return (n.local_id, n.type, n.kernel, n.grid, n.block)


# Sessions being captured: a thread's own first, else the most recent one of any thread
# (autograd's engine threads and user helper threads record into the capture in flight).
_local = threading.local()
_global: List[CaptureSession] = []
_glock = threading.Lock()


def push(session: CaptureSession) -> None:
    st = getattr(_local, "stack", None)
    if st is None:
        st = _local.stack = []
    st.append(session)
    with _glock:
        _global.append(session)


def _remove(stack: List[CaptureSession], session: CaptureSession) -> None:
    if stack and stack[-1] is session:  # the usual case: the innermost capture ends
        stack.pop()
    elif session in stack:
        stack.remove(session)


def pop(session: CaptureSession) -> None:
    _remove(getattr(_local, "stack", None) or [], session)
    with _glock:
        _remove(_global, session)


def current() -> Optional[CaptureSession]:
    st = getattr(_local, "stack", None)
    if st:
        return st[-1]
    with _glock:
        return _global[-1] if _global else None


@contextlib.contextmanager
def lane_scope(key: Any, label: Optional[str], registry: Registry = REGISTRY) -> Iterator[int]:
    """Put the nodes captured in the block on the labelled lane of ``key``; yields the lane id.

    The torch-free part of ``mark_stream`` (key = ``("stream", cuda stream handle)``): the
    lane id comes from the process-wide allocator (stable per key), the label is recorded
    with the capture in flight only, so it names this graph's nodes and no other graph's.
    The graph is listed on entry, before the caller switches streams.
    """
    lane = registry.lanes.lane(key, label)
    sess = current()
    tok = None
    if sess is not None and sess.recorder.active:
        if label is not None:
            sess.label_lane(lane, label)
        tok = sess.recorder.open({"stream": lane}, before=sess.recorder.snapshot())
    try:
        yield lane
    finally:
        if tok is not None:
            sess.recorder.close(tok)
