"""Node counting, markers, cloning and the node table through the CUDA driver API.

:class:`CudaGraphBackend` is shared by the cuda-runtime and cupti backends, which differ
only in how they read node local ids and executable graph ids.
"""
from __future__ import annotations

import contextlib
import ctypes
from typing import Any, ContextManager, Dict, List, Optional, Tuple

from ...errors import CaptureError
from .. import fastpath
from ..resolve import NodeInfo
from .base import CaptureBackend, node_type_name

__all__ = ["CudaGraphBackend"]


def _check(res: Tuple, what: str) -> Any:
    err = res[0]
    if int(err) != 0:
        raise CaptureError(f"{what} failed: {err}")
    return res[1] if len(res) == 2 else res[1:]


class _KernelNodeParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h, CUDA >= 12.0)."""

    _fields_ = [("func", ctypes.c_void_p),
                ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("kernelParams", ctypes.c_void_p), ("extra", ctypes.c_void_p),
                ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


#: CU_STREAM_CAPTURE_STATUS_ACTIVE (cuda.h)
_CU_STREAM_CAPTURE_STATUS_ACTIVE = 1

#: CUgraphNodeType values (cuda.h) -> our names
_CU_NODE_TYPES = {0: "kernel", 1: "memcpy", 2: "memset", 3: "host", 4: "graph", 5: "empty", 6: "event_wait",
                  7: "event_record", 8: "ext_semas_signal", 9: "ext_semas_wait", 10: "mem_alloc", 11: "mem_free",
                  12: "batch_mem_op", 13: "conditional"}


def _address(fn: Any) -> Optional[int]:
    """The address of a ctypes foreign function (None for None)."""
    return ctypes.cast(fn, ctypes.c_void_p).value if fn is not None else None


class CudaGraphBackend(CaptureBackend):
    """Node counting and the node table through the driver API; ids left to subclasses.

    The per-node driver calls go through ctypes on libcuda: building cuda-bindings' Python
    objects per node made the node table the largest part of the capture overhead
    (BENCHMARKS.md, "capture"). ``node_infos_bindings`` reads the same table through
    cuda-bindings; a GPU test checks that both agree.
    """

    def __init__(self) -> None:
        from cuda.bindings import driver, runtime

        self._rt, self._drv = runtime, driver
        self._cu = ctypes.CDLL("libcuda.so.1")
        self._cu.cuGraphGetNodes.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
        self._get_nodes = self._cu.cuGraphGetNodes  # called at every scope edge
        self._cu.cuGraphClone.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        self._cu.cuGraphDestroy.argtypes = [ctypes.c_void_p]
        self._cu.cuGraphAddEmptyNode.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p,
                                                 ctypes.c_size_t]
        self._cu.cuGraphNodeGetType.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        self._cu.cuGraphKernelNodeGetParams_v2.argtypes = [ctypes.c_void_p, ctypes.POINTER(_KernelNodeParams)]
        self._cu.cuFuncGetName.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_void_p]
        # (stream, *status, *id, *graph, **deps, *numDeps): exported by every driver since 11.3
        self._capture_info = getattr(self._cu, "cuStreamGetCaptureInfo_v2", None)
        if self._capture_info is not None:
            self._capture_info.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.c_void_p,
                                           ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p]
        self._kernel_name = getattr(self._cu, "cuKernelGetName", None)
        if self._kernel_name is not None:
            self._kernel_name.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_void_p]
        # (graph, *from, *to, *edgeData, *numEdges): CUDA >= 12.3 (the only form in CUDA 13's
        # headers); the 4-argument cuGraphGetEdges where a driver lacks it
        self._get_edges_v2 = getattr(self._cu, "cuGraphGetEdges_v2", None)
        if self._get_edges_v2 is not None:
            self._get_edges_v2.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                           ctypes.POINTER(ctypes.c_size_t)]
        self._get_edges = getattr(self._cu, "cuGraphGetEdges", None)
        if self._get_edges is not None:
            self._get_edges.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.POINTER(ctypes.c_size_t)]
        self._names: Dict[Tuple[str, int], Optional[str]] = {}  # (func|kern, handle) -> name
        # driver function addresses for the compiled path (fastpath): called from C, no ctypes
        self._get_nodes_addr = _address(self._get_nodes)
        self._capture_info_addr = _address(self._capture_info)
        self._clone_addr = _address(self._cu.cuGraphClone)
        #: the table reader's driver functions (``raw_table``): cuGraphGetNodes, cuGraphNodeGetType,
        #: cuGraphKernelNodeGetParams_v2
        self._table_addrs: Tuple[Optional[int], ...] = (
            self._get_nodes_addr, _address(self._cu.cuGraphNodeGetType),
            _address(getattr(self._cu, "cuGraphKernelNodeGetParams_v2", None)))
        #: cuptiGetGraphNodeId's address where the backend has CUPTI (``raw_table`` needs it)
        self._node_id_addr: Optional[int] = None
        self._cupti_python: Optional[bool] = None  # probed on the first calibration

    def count_function(self) -> Optional[int]:
        return self._get_nodes_addr

    def calibration_unavailable(self) -> Optional[str]:
        if self._cupti_python is None:
            import importlib.util

            self._cupti_python = importlib.util.find_spec("cupti") is not None
        return None if self._cupti_python else "cupti-python is not installed (pip install cupti-python)"

    def activity_session(self, collected: List[Any], exec_id: Optional[int]) -> ContextManager[None]:
        from ..calibration import activity_session

        return activity_session(collected, exec_id, getattr(self, "libcupti", None))

    def capture_graph(self, stream: int) -> Optional[int]:
        fast = fastpath.module()
        if fast is not None and self._capture_info_addr:
            return fast.capture_graph(self._capture_info_addr, stream)
        if self._capture_info is not None:  # ctypes: no cuda-bindings objects at capture start
            status, graph = ctypes.c_int(), ctypes.c_void_p()
            if self._capture_info(stream, ctypes.byref(status), None, ctypes.byref(graph), None, None) != 0:
                return None
            return graph.value if status.value == _CU_STREAM_CAPTURE_STATUS_ACTIVE and graph.value else None
        res = self._rt.cudaStreamGetCaptureInfo(stream)
        if int(res[0]) != 0 or int(res[1]) != int(self._rt.cudaStreamCaptureStatus.cudaStreamCaptureStatusActive):
            return None
        return int(res[3])

    def _cu_check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise CaptureError(f"{what} failed with CUresult {rc}")

    def node_count(self, graph: int) -> int:
        n = ctypes.c_size_t(0)
        rc = self._get_nodes(graph, None, ctypes.byref(n))
        if rc:
            self._cu_check(rc, "cuGraphGetNodes")
        return n.value

    def list_nodes(self, graph: int) -> List[int]:
        n = ctypes.c_size_t(self.node_count(graph))
        if not n.value:  # an empty array with a non-NULL pointer is CUDA_ERROR_INVALID_VALUE
            return []
        arr = (ctypes.c_size_t * n.value)()  # handles as integers, converted in C
        self._cu_check(self._cu.cuGraphGetNodes(graph, arr, ctypes.byref(n)), "cuGraphGetNodes")
        return arr[:n.value]

    def add_marker(self, graph: int) -> Optional[int]:
        node = ctypes.c_void_p()
        if self._cu.cuGraphAddEmptyNode(ctypes.byref(node), graph, None, 0) != 0 or not node.value:
            return None
        return self.local_id(node.value)

    def clone_graph(self, graph: int) -> Optional[int]:
        fast = fastpath.module()
        if fast is not None:
            return fast.out_ptr(self._clone_addr, graph)
        out = ctypes.c_void_p()
        # fails for graphs that cannot be cloned (memory allocation / free nodes): read now
        return out.value if self._cu.cuGraphClone(ctypes.byref(out), graph) == 0 and out.value else None

    def destroy_graph(self, graph: int) -> None:
        self._cu.cuGraphDestroy(graph)

    def raw_table(self, graph: int) -> Optional[bytes]:
        fast = fastpath.module()
        get_nodes, get_type, get_params = self._table_addrs
        if fast is None or None in (get_nodes, get_type, self._node_id_addr):
            return None
        return fast.read_nodes(get_nodes, get_type, get_params, self._node_id_addr, graph)

    def decode_table(self, raw: bytes) -> List[NodeInfo]:
        out = []
        for handle, node_id, t, read, func, kern, *dims in fastpath.NODE_ROW.iter_unpack(raw):
            kernel = grid = block = None
            kind = _CU_NODE_TYPES.get(t, "other")
            if kind == "kernel" and read:
                grid, block = tuple(dims[:3]), tuple(dims[3:])
                kernel = self._name("func", func) or self._name("kern", kern)
            out.append(NodeInfo(handle=handle, local_id=node_id & 0xFFFFFFFF, type=kind, kernel=kernel,
                                grid=grid, block=block))
        return out

    def edges(self, graph: int) -> Optional[List[Tuple[int, int, int, int]]]:
        raw = self.raw_edges(graph)
        return None if raw is None else self.decode_edges(raw)

    def raw_edges(self, graph: int) -> Optional[Tuple[int, Any, Any, Any]]:
        """``cuGraphGetEdges_v2`` (with each edge's ``CUgraphEdgeData``: from_port, to_port,
        type, 5 reserved bytes), else ``cuGraphGetEdges`` (plain dependencies); None when
        neither answers. Two calls, the count then the edges, into ctypes arrays kept as
        they are: (count, from handles, to handles, edge data or None)."""
        n = ctypes.c_size_t(0)
        v2 = self._get_edges_v2
        if v2 is not None and v2(graph, None, None, None, ctypes.byref(n)) == 0:
            if not n.value:
                return (0, None, None, None)
            frm, to = (ctypes.c_size_t * n.value)(), (ctypes.c_size_t * n.value)()
            data = (ctypes.c_uint8 * (8 * n.value))()
            if v2(graph, frm, to, data, ctypes.byref(n)) == 0:
                return (n.value, frm, to, data)
        old = self._get_edges
        if old is not None and old(graph, None, None, ctypes.byref(n)) == 0:
            if not n.value:
                return (0, None, None, None)
            frm, to = (ctypes.c_size_t * n.value)(), (ctypes.c_size_t * n.value)()
            if old(graph, frm, to, ctypes.byref(n)) == 0:
                return (n.value, frm, to, None)
        return None

    def decode_edges(self, raw: Tuple[int, Any, Any, Any]) -> List[Tuple[int, int, int, int]]:
        n, frm, to, data = raw
        if not n:
            return []
        src = memoryview(frm).cast("B").cast("Q").tolist()[:n]
        dst = memoryview(to).cast("B").cast("Q").tolist()[:n]
        if data is None:
            return [(a, b, 0, 0) for a, b in zip(src, dst)]
        d = bytes(data)
        return list(zip(src, dst, d[2:8 * n:8], d[0:8 * n:8]))

    def local_id(self, node: int) -> int:
        raise NotImplementedError

    def _name(self, kind: str, handle: Optional[int]) -> Optional[str]:
        if not handle:
            return None
        key = (kind, handle)
        if key not in self._names:
            out = ctypes.c_char_p()
            fn = self._cu.cuFuncGetName if kind == "func" else self._kernel_name
            rc = fn(ctypes.byref(out), handle) if fn is not None else -1
            self._names[key] = out.value.decode(errors="replace") if rc == 0 and out.value else None
        return self._names[key]

    def node_infos(self, graph: int) -> List[NodeInfo]:
        out = []
        t = ctypes.c_int()
        p = _KernelNodeParams()
        for nd in self.list_nodes(graph):
            self._cu_check(self._cu.cuGraphNodeGetType(nd, ctypes.byref(t)), "cuGraphNodeGetType")
            kind = _CU_NODE_TYPES.get(t.value, "other")
            kernel = grid = block = None
            if kind == "kernel" and self._cu.cuGraphKernelNodeGetParams_v2(nd, ctypes.byref(p)) == 0:
                grid = (p.gridDimX, p.gridDimY, p.gridDimZ)
                block = (p.blockDimX, p.blockDimY, p.blockDimZ)
                kernel = self._name("func", p.func) or self._name("kern", p.kern)
            out.append(NodeInfo(handle=nd, local_id=self.local_id(nd), type=kind, kernel=kernel, grid=grid, block=block))
        return out

    def node_infos_bindings(self, graph: int) -> List[NodeInfo]:
        """The node table read through cuda-bindings (reference for the ctypes path)."""
        _, n = _check(self._rt.cudaGraphGetNodes(graph, 0), "cudaGraphGetNodes")
        nodes = _check(self._rt.cudaGraphGetNodes(graph, n), "cudaGraphGetNodes")[0] if n else []
        out = []
        for nd in nodes:
            t = node_type_name(_check(self._rt.cudaGraphNodeGetType(nd), "cudaGraphNodeGetType").name)
            kernel = grid = block = None
            if t == "kernel":
                with contextlib.suppress(CaptureError):
                    p = _check(self._drv.cuGraphKernelNodeGetParams(nd), "cuGraphKernelNodeGetParams")
                    grid = (int(p.gridDimX), int(p.gridDimY), int(p.gridDimZ))
                    block = (int(p.blockDimX), int(p.blockDimY), int(p.blockDimZ))
                    with contextlib.suppress(CaptureError):
                        name = _check(self._drv.cuFuncGetName(p.func), "cuFuncGetName")
                        kernel = name.decode() if isinstance(name, bytes) else str(name)
            out.append(NodeInfo(handle=int(nd), local_id=self.local_id(int(nd)), type=t, kernel=kernel, grid=grid, block=block))
        return out
