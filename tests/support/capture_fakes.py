"""A fake CUDA graph backend for the capture stage's CPU tests (no torch, no GPU).

``FakeCuda`` plays the driver: graphs under capture on streams, nodes with local ids,
executable graphs with their own ids. ``launch(stream, kernel)`` is what a kernel launch
during capture does: it appends a node to the graph being captured on that stream. Its
``count_function`` is a C-callable ``cuGraphGetNodes`` stand-in (a ctypes callback), so the
compiled recorder counts through a function pointer exactly as on a GPU. ``replay(exec)``
is a graph launch: it counts, and while an ``activity_session`` is open it records one
activity record per work node, as CUPTI would (``busy``: the session cannot start).
"""
from __future__ import annotations

import contextlib
import ctypes
import itertools
import threading
from typing import Any, Dict, Iterator, List, Optional

from perfetto_graph_ann.capture.backends import CaptureBackend
from perfetto_graph_ann.annotations.model import make_key
from perfetto_graph_ann.capture.backends.driver import _KernelNodeParams
from perfetto_graph_ann.capture.resolve import ActivityRecord, NodeInfo

#: CUresult cuGraphGetNodes(CUgraph, CUgraphNode *, size_t *)
GET_NODES = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t))
#: CUresult cuGraphAddEmptyNode(CUgraphNode *, CUgraph, const CUgraphNode *, size_t)
ADD_EMPTY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.c_size_t)
#: CUptiResult cuptiGetGraphNodeId(CUgraphNode, uint64_t *)
NODE_ID = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64))
#: CUresult cuGraphNodeGetType(CUgraphNode, CUgraphNodeType *)
NODE_TYPE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int))
#: CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode, CUDA_KERNEL_NODE_PARAMS_v2 *)
KERNEL_PARAMS = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_KernelNodeParams))
#: CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *)
SUBSCRIBE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p)
#: CUptiResult cuptiEnableCallback(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain, CUpti_CallbackId)
ENABLE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_int, ctypes.c_int)
#: CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle)
UNSUBSCRIBE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
#: void CUpti_CallbackFunc(void *userdata, CUpti_CallbackDomain, CUpti_CallbackId, const void *cbdata)
CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p)
#: CUptiResult cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle, CUpti_CallbackDomain)
ENABLE_DOMAIN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_int)
#: CUptiResult cuptiFinalize(void)
FINALIZE = ctypes.CFUNCTYPE(ctypes.c_int)
#: CUresult cuCtxGetCurrent(CUcontext *)
CTX_GET_CURRENT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))
#: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
MULTIPLE_SUBSCRIBERS = 39
#: CUgraphNodeType values of the node types the fakes make
CU_TYPES = {"kernel": 0, "memcpy": 1, "memset": 2, "empty": 5, "event_record": 7}


class FakeCuda(CaptureBackend):
    name = "fake"

    def __init__(self, first_graph_id: int = 1):
        self._ids = itertools.count(first_graph_id)
        self._handles = itertools.count(0x1000, 8)
        self.capturing: Dict[int, int] = {}  # stream -> graph handle
        self.graphs: Dict[int, List[NodeInfo]] = {}  # graph handle -> nodes
        self.graph_ids: Dict[int, int] = {}
        self.execs: Dict[int, int] = {}  # exec handle -> exec id
        self.lock = threading.Lock()
        self.list_calls = 0
        self.count_calls = 0
        self.can_clone = True  # False: the session must read the node table at finish
        self.destroyed: List[int] = []
        self.can_mark = True  # False: add_marker unsupported (the session must count)
        self.marker_calls = 0
        self.marker_id_skew = 0  # != 0: a driver whose marker ids are not listing positions
        self.count_rc = 0  # != 0: the C count function fails with this CUresult
        self.c_count = True  # False: no count_function (the compiled recorder calls node_count)
        self.node_id_rc = 0  # != 0: the C node-id function fails with this code
        self.table_id_reads = 0  # node ids the C table reader asked for
        self.listing_short = 0  # > 0: a listing returns this many nodes fewer than the count said
        self._c_get_nodes = GET_NODES(self._c_node_count)  # kept alive with the fake
        self._c_add_empty = ADD_EMPTY(self._c_add_marker)
        self._c_node_id = NODE_ID(self._c_marker_id)
        self.c_table = False  # True: raw_table reads the table in C (fastpath.read_nodes) like the driver's
        self.table_rc: Dict[str, int] = {}  # call name -> the CUresult the C table reader's call returns
        self._c_type = NODE_TYPE(self._c_node_type)
        self._c_params = KERNEL_PARAMS(self._c_kernel_params)
        self._c_any_id = NODE_ID(self._c_node_local_id)
        self._kernel_handles: Dict[str, int] = {}  # kernel name -> its stand-in CUfunction handle
        self._marker_ids: Dict[int, int] = {}  # marker node handle -> the local id it reports
        self._forgotten: Dict[int, List[NodeInfo]] = {}
        self.exec_nodes: Dict[int, List[NodeInfo]] = {}  # exec handle -> the nodes it was instantiated from
        self.replays: Dict[int, int] = {}  # exec handle -> how many times it was launched
        self.recording: List[Any] = []  # the open activity sessions' (collected, exec_id)
        self.sessions = 0  # activity sessions opened
        self.busy: Optional[str] = None  # the activity session cannot start: this message
        self.no_calibration: Optional[str] = None  # calibration_unavailable()'s answer
        # CUPTI's callback API, for the node watch (nodewatch.py): off unless ``watchable``
        self.watchable = False  # True: node_watch_functions() gives the three below
        self.subscribe_rc = 0  # != 0: cuptiSubscribe refuses with this result
        self.skip_callbacks = 0  # > 0: that many node creations issue no callback (a driver that misses some)
        self.subscribed: Optional[Any] = None  # the subscribed callback (CALLBACK), None: nobody
        self.enabled: set = set()  # (domain, cbid) enabled for the subscriber
        self.subscriptions = 0  # cuptiSubscribe calls that succeeded
        self.unsubscriptions = 0
        self._c_subscribe = SUBSCRIBE(self._cupti_subscribe)
        self._c_enable = ENABLE(self._cupti_enable)
        self._c_unsubscribe = UNSUBSCRIBE(self._cupti_unsubscribe)
        # CUPTI's lifetime, for the detach (NodeWatch.detach): initialised by a subscription,
        # detached by cuptiFinalize, which the driver API exit call site of cuCtxGetCurrent runs
        self.initialised = False  # CUPTI attached to the process
        self.finalizes = 0  # cuptiFinalize calls
        self.exit_sites = True  # False: cuCtxGetCurrent issues no API callback (the detach cannot run)
        self.api_calls = 0  # cuCtxGetCurrent calls
        self._c_enable_domain = ENABLE_DOMAIN(self._cupti_enable_domain)
        self._c_finalize = FINALIZE(self._cupti_finalize)
        self._c_ctx_get_current = CTX_GET_CURRENT(self._cu_ctx_get_current)

    # driver side ----------------------------------------------------------------
    def begin_capture(self, stream: int) -> int:
        g = next(self._handles)
        self.graphs[g] = []
        self.graph_ids[g] = next(self._ids)
        self.capturing[stream] = g
        return g

    def join(self, side_stream: int, origin: int) -> None:
        """A side stream waits on a capturing stream: it joins that capture."""
        self.capturing[side_stream] = self.capturing[origin]

    def launch(self, stream: int, kernel: str = "k", type: str = "kernel", grid=(1, 1, 1), block=(128, 1, 1)) -> int:
        with self.lock:
            g = self.capturing[stream]
            h = next(self._handles)
            self.graphs[g].append(NodeInfo(h, len(self.graphs[g]), type, kernel if type == "kernel" else None,
                                           grid if type == "kernel" else None, block if type == "kernel" else None))
            self._node_created(g, h)
            return h

    def _node_created(self, graph: int, node: int) -> None:
        """CUPTI's GRAPHNODE_CREATED resource callback, where someone subscribed and enabled it."""
        if self.subscribed is None or (3, 13) not in self.enabled:
            return
        if self.skip_callbacks > 0:
            self.skip_callbacks -= 1
            return
        graph_data = (ctypes.c_void_p * 7)(graph, None, node)  # CUpti_GraphData: graph, originalGraph, node, ...
        resource = (ctypes.c_void_p * 3)(None, None, ctypes.addressof(graph_data))  # CUpti_ResourceData
        self.subscribed(None, 3, 13, ctypes.addressof(resource))

    def _cupti_subscribe(self, out, callback, userdata) -> int:
        if self.subscribe_rc:
            return self.subscribe_rc
        if self.subscribed is not None:
            return MULTIPLE_SUBSCRIBERS
        self.subscribed = CALLBACK(callback)
        self.subscriptions += 1
        self.initialised = True
        out[0] = 0x5B5
        return 0

    def _cupti_enable_domain(self, enable, subscriber, domain) -> int:
        if subscriber != 0x5B5 or self.subscribed is None:
            return 1
        (self.enabled.add if enable else self.enabled.discard)((domain, None))
        return 0

    def _cupti_finalize(self) -> int:
        self.subscribed, self.enabled, self.initialised = None, set(), False
        self.finalizes += 1
        return 0

    def _cu_ctx_get_current(self, out) -> int:
        """A driver API call: its exit call site reaches a subscriber of the driver API domain."""
        self.api_calls += 1
        out[0] = 0xC7
        if self.exit_sites and self.subscribed is not None and (1, None) in self.enabled:
            site = ctypes.c_int(1)  # CUpti_CallbackData.callbackSite: CUPTI_API_EXIT
            self.subscribed(None, 1, 14, ctypes.addressof(site))
        return 0

    def _cupti_enable(self, enable, subscriber, domain, cbid) -> int:
        if subscriber != 0x5B5 or self.subscribed is None:
            return 1  # CUPTI_ERROR_INVALID_PARAMETER
        (self.enabled.add if enable else self.enabled.discard)((domain, cbid))
        return 0

    def _cupti_unsubscribe(self, subscriber) -> int:
        if subscriber != 0x5B5 or self.subscribed is None:
            return 1
        self.subscribed, self.enabled = None, set()
        self.unsubscriptions += 1
        return 0

    def node_watch_functions(self):
        if not self.watchable:
            return None
        return tuple(ctypes.cast(f, ctypes.c_void_p).value
                     for f in (self._c_subscribe, self._c_enable, self._c_unsubscribe))

    def cupti_detach_functions(self):
        if not self.watchable:
            return None
        return tuple(ctypes.cast(f, ctypes.c_void_p).value for f in (
            self._c_subscribe, self._c_enable_domain, self._c_unsubscribe, self._c_finalize, self._c_ctx_get_current))

    def end_capture(self, stream: int) -> int:
        g = self.capturing.pop(stream)
        for s in [s for s, gg in self.capturing.items() if gg == g]:
            del self.capturing[s]
        return g

    def instantiate(self, graph: int) -> int:
        e = next(self._handles)
        self.execs[e] = next(self._ids)
        nodes = self.graphs[graph]
        self.exec_nodes[e] = list(self._forgotten.get(graph, []) if nodes is None else nodes)
        return e

    def replay(self, graph_exec: int) -> None:
        """cudaGraphLaunch: every work node runs once, on stream 7, in creation order."""
        self.replays[graph_exec] = self.replays.get(graph_exec, 0) + 1
        eid = self.execs[graph_exec]
        work = [n for n in self.exec_nodes[graph_exec] if n.type in ("kernel", "memcpy", "memset")]
        for collected, only in self.recording:
            if only is None or only == eid:
                base = 1000 * self.replays[graph_exec]
                collected.extend(ActivityRecord(make_key(eid, n.local_id), 7, base + i, base + i + 1, n.type)
                                 for i, n in enumerate(work))

    # backend interface ------------------------------------------------------------
    def capture_graph(self, stream: int) -> Optional[int]:
        return self.capturing.get(stream)

    def node_count(self, graph: int) -> int:
        self.count_calls += 1
        with self.lock:
            return len(self.graphs[graph])

    def _c_node_count(self, graph, nodes, num) -> int:
        if self.count_rc:
            return self.count_rc
        if nodes:  # a listing, as cuGraphGetNodes fills it
            if self.table_rc.get("cuGraphGetNodes"):
                return self.table_rc["cuGraphGetNodes"]
            with self.lock:
                listing = [n.handle for n in self.graphs[graph or 0]][:num[0]]
            if self.listing_short:  # a listing shorter than the count asked for just before
                listing = listing[:max(0, len(listing) - self.listing_short)]
            arr = ctypes.cast(nodes, ctypes.POINTER(ctypes.c_void_p))
            for i, h in enumerate(listing):
                arr[i] = h
            num[0] = len(listing)
            return 0
        num[0] = self.node_count(graph or 0)
        return 0

    def _node(self, handle: int) -> NodeInfo:
        with self.lock:
            return next(n for nodes in self.graphs.values() if nodes for n in nodes if n.handle == handle)

    def _c_node_type(self, node, out) -> int:
        if self.table_rc.get("cuGraphNodeGetType"):
            return self.table_rc["cuGraphNodeGetType"]
        out[0] = CU_TYPES[self._node(node).type]
        return 0

    def _c_kernel_params(self, node, params) -> int:
        n = self._node(node)
        if self.table_rc.get("cuGraphKernelNodeGetParams_v2") or n.kernel is None:
            return self.table_rc.get("cuGraphKernelNodeGetParams_v2") or 1
        p = params[0]
        p.func = self._kernel_handles.setdefault(n.kernel, 0x7000 + 16 * len(self._kernel_handles))
        p.gridDimX, p.gridDimY, p.gridDimZ = n.grid
        p.blockDimX, p.blockDimY, p.blockDimZ = n.block
        return 0

    def _c_node_local_id(self, node, out) -> int:
        self.table_id_reads += 1
        if self.table_rc.get("cuptiGetGraphNodeId"):
            return self.table_rc["cuptiGetGraphNodeId"]
        out[0] = (0xAB << 32) | self._node(node).local_id  # the high half: the graph's id, ignored
        return 0

    def raw_table(self, graph: int):
        from perfetto_graph_ann.capture import fastpath

        if not self.c_table or fastpath.module() is None:
            return None
        fns = (self._c_get_nodes, self._c_type, self._c_params, self._c_any_id)
        return fastpath.module().read_nodes(*(ctypes.cast(f, ctypes.c_void_p).value for f in fns), graph)

    def decode_table(self, raw) -> List[NodeInfo]:
        from perfetto_graph_ann.capture import fastpath

        names = {h: k for k, h in self._kernel_handles.items()}
        types = {v: k for k, v in CU_TYPES.items()}
        return [NodeInfo(h, nid & 0xFFFFFFFF, types[t], names.get(func) if read else None,
                         tuple(d[:3]) if read else None, tuple(d[3:]) if read else None)
                for h, nid, t, read, func, _kern, *d in fastpath.NODE_ROW.iter_unpack(raw)]

    def count_function(self) -> Optional[int]:
        return ctypes.cast(self._c_get_nodes, ctypes.c_void_p).value if self.c_count else None

    def _c_add_marker(self, node_out, graph, deps, ndeps) -> int:
        if not self.can_mark:
            return 801  # CUDA_ERROR_NOT_SUPPORTED
        with self.lock:
            self.marker_calls += 1
            nodes = self.graphs[graph]
            h = next(self._handles)
            nodes.append(NodeInfo(h, len(nodes), "empty", None, None, None))
            self._marker_ids[h] = len(nodes) - 1 + self.marker_id_skew
            self._node_created(graph, h)
        node_out[0] = h
        return 0

    def _c_marker_id(self, node, out) -> int:
        if self.node_id_rc:
            return self.node_id_rc
        out[0] = self._marker_ids[node]
        return 0

    def marker_functions(self):
        if not self.c_count:
            return None
        return tuple(ctypes.cast(f, ctypes.c_void_p).value for f in (self._c_add_empty, self._c_node_id))

    def add_marker(self, graph: int) -> Optional[int]:
        """Like cuGraphAddEmptyNode + the new node's local id (None: ``can_mark`` is off)."""
        if not self.can_mark:
            return None
        with self.lock:
            self.marker_calls += 1
            nodes = self.graphs[graph]
            h = next(self._handles)
            nodes.append(NodeInfo(h, len(nodes), "empty", None, None, None))
            self._node_created(graph, h)
            return len(nodes) - 1 + self.marker_id_skew

    def list_nodes(self, graph: int) -> List[int]:
        self.list_calls += 1
        with self.lock:
            return [n.handle for n in self.graphs[graph]]

    def node_infos(self, graph: int) -> List[NodeInfo]:
        if graph in self.destroyed:
            raise AssertionError(f"graph {graph:#x} read after it was destroyed")
        return list(self.graphs[graph])

    def clone_graph(self, graph: int) -> Optional[int]:
        """Like cuGraphClone: new handles, same local ids and order."""
        if not self.can_clone:
            return None
        with self.lock:
            c = next(self._handles)
            self.graphs[c] = [n._replace(handle=next(self._handles)) for n in self.graphs[graph]]
            self.graph_ids[c] = 1000 + c  # not from the driver's id sequence: tests count those
            return c

    def destroy_graph(self, graph: int) -> None:
        if graph in self.destroyed:
            raise AssertionError(f"graph {graph:#x} destroyed twice")
        self.destroyed.append(graph)

    def forget(self, graph: int) -> None:
        """What torch does to the template graph at instantiation (keep_graph=False)."""
        self._forgotten[graph] = self.graphs[graph]  # what a re-instantiation (keep_graph) runs
        self.graphs[graph] = None  # reading it now fails loudly

    def exec_id(self, graph_exec: int) -> int:
        return self.execs[graph_exec]

    def calibration_unavailable(self) -> Optional[str]:
        return self.no_calibration

    @contextlib.contextmanager
    def activity_session(self, collected: List[Any], exec_id: Optional[int]) -> Iterator[None]:
        if self.busy:
            raise RuntimeError(self.busy)
        self.sessions += 1
        entry = (collected, exec_id)
        self.recording.append(entry)
        try:
            yield
        finally:
            self.recording.remove(entry)

    def graph_id(self, graph: int) -> Optional[int]:
        return self.graph_ids[graph]


@contextlib.contextmanager
def pushed_capture(stream: int) -> Iterator[Any]:
    """A capture in flight on a fresh ``FakeCuda``: the session started on ``stream``, pushed as
    the current one and its backend in use, as ``torch.cuda.graph`` leaves it while the user's
    code runs. Yields the session, with its fake driver as ``session.cuda``."""
    from perfetto_graph_ann.capture import backends
    from perfetto_graph_ann.capture import session as S
    from perfetto_graph_ann.capture.registry import Registry

    cuda = FakeCuda()
    cuda.begin_capture(stream)
    sess = S.CaptureSession(cuda, stream, Registry())
    sess.start()
    sess.cuda = cuda
    S.push(sess)
    try:
        with backends.use(cuda):
            yield sess
    finally:
        S.pop(sess)


def resolve_capture(sess: Any, stream: int) -> Any:
    """End the capture of a :func:`pushed_capture` session, instantiate it and return its record."""
    sess.finish_capture()
    sess.bind_exec(sess.cuda.instantiate(sess.cuda.end_capture(stream)))
    return sess.record


@contextlib.contextmanager
def recorder_scope(sess: Any, fields: Any) -> Iterator[None]:
    """A scope opened straight on ``sess``'s recorder for the block (``fields``: a name or a
    dict, as ``mark_kernels`` takes them), without the public API around it."""
    from perfetto_graph_ann.capture.scopes import normalize_annotation

    tok = sess.recorder.open(normalize_annotation(fields))
    try:
        yield
    finally:
        sess.recorder.close(tok)


#: The stream the fake torch's ``current_stream()`` and ``torch.cuda.graph`` capture on.
FAKE_TORCH_STREAM = 0x70


class FakeStream:
    """``torch.cuda.current_stream()`` of :func:`fake_torch`: the capture stream ``FAKE_TORCH_STREAM``."""

    cuda_stream = FAKE_TORCH_STREAM


def fake_torch(cuda: FakeCuda) -> Any:
    """A ``torch`` module on ``cuda`` with just what api.graph touches: torch.cuda.graph,
    current_device, current_stream (``FAKE_TORCH_STREAM``)."""
    import types

    class CUDAGraph:
        def __init__(self):
            self.template = self.exec = None

        def raw_cuda_graph_exec(self):
            return self.exec or 0

        def instantiate(self):
            self.exec = cuda.instantiate(self.template)

        def replay(self):
            assert self.exec, "replay before instantiate"
            cuda.replay(self.exec)

        def reset(self):
            self.exec = None

        def capture_begin(self, pool=None, capture_error_mode="global"):  # on the current stream
            self.template = cuda.begin_capture(FAKE_TORCH_STREAM)

        def capture_end(self):  # instantiate, drop the template (keep_graph=False)
            cuda.end_capture(FAKE_TORCH_STREAM)
            self.instantiate()
            cuda.forget(self.template)

    class graph:  # torch.cuda.graph: capture_begin / capture_end on its capture stream
        def __init__(self, g, pool=None, stream=None, capture_error_mode="global"):
            self.g, self.capture_stream = g, FakeStream()

        def __enter__(self):
            self.g.capture_begin()

        def __exit__(self, *exc):
            self.g.capture_end()
            return False

    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(graph=graph, CUDAGraph=CUDAGraph, current_device=lambda: 0,
                                       current_stream=lambda: FakeStream(), synchronize=lambda: None,
                                       is_current_stream_capturing=lambda: bool(cuda.capturing))
    # what calibration asks of torch's profiler: set torch.profiling = True to be "inside" one
    torch.profiling = False
    torch._C = types.SimpleNamespace(_autograd=types.SimpleNamespace(_profiler_enabled=lambda: torch.profiling,
                                                                     _get_sequence_nr=lambda: 0))
    # mark_kernels' backward tagging (on by default) reads grad mode: off, as in a serving capture
    torch.is_grad_enabled = lambda: False
    return torch


def fake_profiler_module(monkeypatch: Any, **functions: Any) -> Any:
    """A fake ``torch`` whose ``torch.autograd.profiler`` holds ``functions`` (torch's
    ``_prepare_profiler`` / ``_enable_profiler`` / ``_disable_profiler`` stand-ins), put in
    ``sys.modules`` for the test. Returns the profiler module."""
    import sys
    import types

    tap = types.ModuleType("torch.autograd.profiler")
    for name, fn in functions.items():
        setattr(tap, name, fn)
    torch = types.ModuleType("torch")
    torch.autograd = types.ModuleType("torch.autograd")
    torch.autograd.profiler = tap
    torch._C = types.SimpleNamespace(_autograd=types.SimpleNamespace(_profiler_enabled=lambda: False))
    for name, mod in (("torch", torch), ("torch.autograd", torch.autograd), ("torch.autograd.profiler", tap)):
        monkeypatch.setitem(sys.modules, name, mod)
    return tap
