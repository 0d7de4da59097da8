"""One capture, from ``graph(...)``'s entry to a registered :class:`GraphRecord`. Torch-free.

Lifecycle (``api.graph`` drives it; tests drive it with a fake backend):

1. ``start()`` right after capture began: finds the graph under capture on the capture
   stream; scopes list that graph's nodes (by graph handle, so a scope on a side stream
   that has not joined yet still sees the nodes it adds once it joins).
2. ``finish_capture()`` just before capture ends: reads the template graph's node table
   (type, local id, kernel, grid, block) while it still exists (torch destroys it at
   instantiation unless ``keep_graph=True``) and freezes the merged scope annotations.
3. ``bind_exec(exec handle)`` after each instantiation: rekeys to the executable graph's
   id and registers (replacing the graph's previous entry).
4. ``apply_calibration(table)``: adds (stream, ordinal) per node.
"""
from __future__ import annotations

import contextlib
import itertools
import threading
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from ..errors import CaptureError
from .annotations import GraphRecord
from .backends import CaptureBackend
from .registry import REGISTRY, Registry
from .resolve import NodeInfo, resolve_graph, with_calibration
from .scopes import ScopeRecorder

_owner_ids = itertools.count(1)


class CaptureSession:
    def __init__(self, backend: CaptureBackend, capture_stream: int, registry: Registry = REGISTRY,
                 owner: Any = None, device: Optional[int] = None):
        self.backend = backend
        self.capture_stream = capture_stream
        self.registry = registry
        self.owner = owner if owner is not None else next(_owner_ids)
        self.device = device
        self.graph: Optional[int] = None
        self.recorder = ScopeRecorder(self._list)
        self.nodes: Optional[List[NodeInfo]] = None
        self.template_id: Optional[int] = None
        self.annotations: Dict[int, Dict[str, Any]] = {}
        #: lane id -> label given during this capture (first label wins), see label_lane
        self.lane_labels: Dict[int, str] = {}
        self._lane_lock = threading.Lock()
        self.exec_id: Optional[int] = None
        self._record: Optional[GraphRecord] = None
        self._calibration: Optional[Mapping[int, Tuple[int, int]]] = None

    def _list(self) -> Optional[List[int]]:
        if self.graph is None:
            return None
        return self.backend.list_nodes(self.graph)

    def start(self) -> None:
        self.graph = self.backend.capture_graph(self.capture_stream)
        if self.graph is None:
            raise CaptureError(f"stream {self.capture_stream:#x} is not capturing; graph() must wrap an active capture")

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
        self.nodes = self.backend.node_infos(self.graph)
        if len({n.local_id for n in self.nodes}) != len(self.nodes):
            raise CaptureError("two nodes of the captured graph report the same local id")
        self.template_id = self.backend.graph_id(self.graph)
        self.annotations = self.recorder.merged()
        self.recorder.active = False

    @property
    def record(self) -> Optional[GraphRecord]:
        """The executable graph's record (built on first use), None before instantiation."""
        if self._record is None and self.exec_id is not None:
            with self._lane_lock:
                labels = dict(self.lane_labels)
            rec = resolve_graph(self.nodes or [], self.annotations, self.exec_id, self.template_id, self.device,
                                lane_labels=labels)
            self._record = with_calibration(rec, self._calibration) if self._calibration else rec
        return self._record

    def bind_exec(self, graph_exec: int) -> int:
        """Rekey to the executable graph ``graph_exec`` and register; returns its id.

        The node records are built lazily (first read of :attr:`record` or the registry).
        """
        if self.nodes is None:
            raise CaptureError("bind_exec before finish_capture: the capture's node table was not read")
        self.exec_id = self.backend.exec_id(graph_exec)
        self._record, self._calibration = None, None
        self.registry.put(self.owner, lambda: self.record)
        return self.exec_id

    def apply_calibration(self, table: Mapping[int, Tuple[int, int]]) -> GraphRecord:
        if self.exec_id is None:
            raise CaptureError("calibration before the graph was instantiated")
        self._calibration, self._record = dict(table), None
        self.registry.put(self.owner, lambda: self.record)
        return self.record

    def drop(self) -> None:
        self.exec_id, self._record = None, None
        self.registry.drop(self.owner)


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


def pop(session: CaptureSession) -> None:
    st = getattr(_local, "stack", [])
    if session in st:
        st.remove(session)
    with _glock:
        if session in _global:
            _global.remove(session)


def current() -> Optional[CaptureSession]:
    st = getattr(_local, "stack", None)
    if st:
        return st[-1]
    with _glock:
        return _global[-1] if _global else None


@contextlib.contextmanager
def lane_scope(key: Any, label: str, registry: Registry = REGISTRY) -> Iterator[int]:
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
        sess.label_lane(lane, label)
        tok = sess.recorder.open({"stream": lane}, before=sess.recorder.snapshot())
    try:
        yield lane
    finally:
        if tok is not None:
            sess.recorder.close(tok)
