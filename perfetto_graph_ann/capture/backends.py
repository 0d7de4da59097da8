"""Capture backends behind one interface, and the automatic choice between them.

Three ways to learn the key ``(exec graph id << 32) | node local id`` of a captured node:

- ``torch``: torch's own ``torch.cuda.graph_annotations`` (torch >= 2.15, driver >= 13.1):
  everything is deferred to torch.
- ``cuda-runtime``: the runtime's ``cudaGraphNodeGetLocalId`` / ``cudaGraphExecGetId``
  (driver >= 13.1), through cuda-bindings.
- ``cupti``: libcupti's ``cuptiGetGraphNodeId`` (template key) and ``cuptiGetGraphExecId``
  (older drivers, e.g. 580 / CUDA 13.0).

The last two share :class:`CudaGraphBackend` (capture info, node listing, kernel params
through cuda-bindings) and differ only in the two id functions. The choice is a pure
function of :class:`EnvFacts` so it is tested without a GPU; ``probe_facts()`` reads the
facts from the machine once.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import glob
import os
import re
import sys
import threading
from typing import Any, ContextManager, Dict, Iterator, List, Optional, Tuple

from ..annotations.model import node_type_name
from ..errors import CaptureError
from . import fastpath
from .resolve import NodeInfo

TORCH = "torch"
CUDA_RUNTIME = "cuda-runtime"
CUPTI = "cupti"
BACKENDS = (TORCH, CUDA_RUNTIME, CUPTI)
#: driver version (cudaDriverGetVersion) from which graph node tools / local ids exist
TOOLS_ID_DRIVER = 13010


class CaptureBackend:
    """What capture needs from CUDA. Handles are plain ints."""

    name: str = "abstract"

    def capture_graph(self, stream: int) -> Optional[int]:
        """The graph being captured on ``stream`` (cudaStream_t as int), or None."""
        raise NotImplementedError

    def node_count(self, graph: int) -> int:
        """How many nodes ``graph`` has now (called at every scope edge: keep it cheap)."""
        return len(self.list_nodes(graph))

    def list_nodes(self, graph: int) -> List[int]:
        """Handles of the nodes now in ``graph``, in creation order."""
        raise NotImplementedError

    def count_function(self) -> Optional[int]:
        """Address of a C function with ``cuGraphGetNodes``' signature, or None.

        With it the compiled recorder (:mod:`.fastpath`) counts at scope edges without
        entering Python; without it every edge calls :meth:`node_count`.
        """
        return None

    def marker_functions(self) -> Optional[Tuple[int, int]]:
        """Addresses of C functions with the signatures of ``cuGraphAddEmptyNode`` and
        ``cuptiGetGraphNodeId`` (whose low 32 bits are the local id), or None.

        With them the compiled recorder adds :meth:`add_marker`'s marker nodes without
        entering Python.
        """
        return None

    def add_marker(self, graph: int) -> Optional[int]:
        """Add an empty node to ``graph`` (under capture); its local id, or None if unsupported.

        Local ids are handed out in creation order from 0 and nodes cannot be destroyed
        during capture, so the id is the number of nodes created before it: what
        :meth:`node_count` says, in constant time where the count walks the whole graph.
        The node stays in the graph (the driver refuses ``cuGraphDestroyNode`` during
        capture, CUresult 401) and does nothing on replay.
        """
        return None

    def clone_graph(self, graph: int) -> Optional[int]:
        """A copy of ``graph`` with the same node local ids and listing order, or None.

        Lets the node table be read after torch destroyed the template graph; None makes
        the session read it right away.
        """
        return None

    def destroy_graph(self, graph: int) -> None:
        """Free a graph returned by :meth:`clone_graph`."""

    def node_infos(self, graph: int) -> List[NodeInfo]:
        """Type, local id, kernel name, grid and block of every node of ``graph``."""
        raise NotImplementedError

    def exec_id(self, graph_exec: int) -> int:
        """The executable graph's id (high 32 bits of its nodes' keys)."""
        raise NotImplementedError

    def graph_id(self, graph: int) -> Optional[int]:
        """The template graph's id, for reference (None if unknown)."""
        return None

    def calibration_unavailable(self) -> Optional[str]:
        """Why this backend cannot record a calibration replay (None: it can)."""
        return f"the {self.name} backend records no GPU activity"

    def activity_session(self, collected: List[Any], exec_id: Optional[int]) -> ContextManager[None]:
        """A context in which the GPU work of executable graph ``exec_id`` is recorded into
        ``collected`` (:class:`~.resolve.ActivityRecord`); raising on entry means it could
        not start (nothing was recorded, nothing replayed)."""
        raise CaptureError(self.calibration_unavailable() or "no activity session")


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
    (benchmarks/capture.py). ``node_infos_bindings`` reads the same table through
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
        self._names: Dict[Tuple[str, int], Optional[str]] = {}  # (func|kern, handle) -> name
        # driver function addresses for the compiled path (fastpath): called from C, no ctypes
        self._get_nodes_addr = _address(self._get_nodes)
        self._capture_info_addr = _address(self._capture_info)
        self._clone_addr = _address(self._cu.cuGraphClone)
        self._cupti_python: Optional[bool] = None  # probed on the first calibration

    def count_function(self) -> Optional[int]:
        return self._get_nodes_addr

    def calibration_unavailable(self) -> Optional[str]:
        if self._cupti_python is None:
            import importlib.util

            self._cupti_python = importlib.util.find_spec("cupti") is not None
        return None if self._cupti_python else "cupti-python is not installed (pip install cupti-python)"

    def activity_session(self, collected: List[Any], exec_id: Optional[int]) -> ContextManager[None]:
        from .calibration import activity_session

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


def find_libcupti() -> Optional[str]:
    """libcupti already loaded by this process (torch's Kineto), else one from the nvidia wheels."""
    with contextlib.suppress(OSError):
        with open("/proc/self/maps") as f:
            for line in f:
                if "libcupti.so" in line:
                    return line.split()[-1]
    for d in sys.path:
        for pattern in ("nvidia/*/lib/libcupti.so*", "nvidia/cu*/lib/libcupti.so*"):
            hits = sorted(glob.glob(os.path.join(d, pattern)))
            if hits:
                return hits[0]
    hits = sorted(glob.glob("/usr/local/cuda*/extras/CUPTI/lib64/libcupti.so*"))
    return hits[0] if hits else None


class CuptiBackend(CudaGraphBackend):
    """Ids from libcupti: ``cuptiGetGraphNodeId`` = (template graph id << 32) | local index."""

    name = CUPTI

    def __init__(self, libcupti: Optional[str] = None) -> None:
        super().__init__()
        path = libcupti or find_libcupti()
        if path is None:
            raise CaptureError("libcupti not found (install nvidia-cuda-cupti or cupti-python)")
        self._lib = ctypes.CDLL(path)
        self.libcupti = path
        self._lib.cuptiGetGraphNodeId.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64)]
        self._lib.cuptiGetGraphExecId.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)]
        self._lib.cuptiGetGraphId.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)]
        self._graph_id_addr = _address(self._lib.cuptiGetGraphId)
        self._marker_addrs = (_address(self._cu.cuGraphAddEmptyNode), _address(self._lib.cuptiGetGraphNodeId))

    def marker_functions(self) -> Optional[Tuple[int, int]]:
        return self._marker_addrs

    def _node_id(self, node: Any) -> int:
        v = ctypes.c_uint64()
        rc = self._lib.cuptiGetGraphNodeId(int(node), ctypes.byref(v))
        if rc != 0:
            raise CaptureError(f"cuptiGetGraphNodeId failed with CUPTI error {rc}")
        return v.value

    def local_id(self, node: Any) -> int:
        return self._node_id(node) & 0xFFFFFFFF

    def graph_id(self, graph: int) -> Optional[int]:
        fast = fastpath.module()
        if fast is not None:
            return fast.out_u32(self._graph_id_addr, graph)
        v = ctypes.c_uint32()
        rc = self._lib.cuptiGetGraphId(int(graph), ctypes.byref(v))
        return v.value if rc == 0 else None

    def exec_id(self, graph_exec: int) -> int:
        v = ctypes.c_uint32()
        rc = self._lib.cuptiGetGraphExecId(int(graph_exec), ctypes.byref(v))
        if rc != 0:
            raise CaptureError(f"cuptiGetGraphExecId failed with CUPTI error {rc}")
        return v.value


class RuntimeIdsBackend(CudaGraphBackend):
    """Ids from the CUDA runtime (driver >= 13.1): node local id and exec graph id."""

    name = CUDA_RUNTIME

    def local_id(self, node: Any) -> int:
        return int(_check(self._rt.cudaGraphNodeGetLocalId(node), "cudaGraphNodeGetLocalId"))

    def graph_id(self, graph: int) -> Optional[int]:
        with contextlib.suppress(Exception):
            return int(_check(self._rt.cudaGraphGetId(self._rt.cudaGraph_t(graph)), "cudaGraphGetId"))
        return None

    def exec_id(self, graph_exec: int) -> int:
        return int(_check(self._rt.cudaGraphExecGetId(self._rt.cudaGraphExec_t(graph_exec)), "cudaGraphExecGetId"))


@dataclasses.dataclass(frozen=True)
class EnvFacts:
    """What the machine offers; everything the backend choice depends on."""

    torch_version: Optional[str] = None  #: None: torch not importable
    cuda_available: bool = False
    torch_native: Optional[bool] = None  #: torch.cuda.graph_annotations.is_available(); None: module absent
    #: torch's annotation entry points this torch lacks (:mod:`.torch_native`), e.g. ("mark_stream",)
    torch_missing: Tuple[str, ...] = ()
    driver_version: Optional[int] = None  #: cudaDriverGetVersion, e.g. 13000
    cuda_bindings: bool = False
    runtime_ids: bool = False  #: cuda-bindings has cudaGraphNodeGetLocalId and cudaGraphExecGetId
    libcupti: Optional[str] = None
    cupti_python: bool = False  #: calibration needs cupti-python's activity API


@dataclasses.dataclass(frozen=True)
class BackendInfo:
    backend: Optional[str]
    reasons: Dict[str, str]  #: backend -> why it was not used (or "chosen")
    calibration: bool
    facts: EnvFacts

    def as_dict(self) -> Dict[str, Any]:
        """The report, plus ``capture_path``: whether scope edges run compiled (:mod:`.fastpath`)."""
        return {"backend": self.backend, "reasons": dict(self.reasons), "calibration": self.calibration,
                "capture_path": fastpath.describe(), "facts": dataclasses.asdict(self.facts)}


def _torch_at_least(version: Optional[str], major: int, minor: int) -> bool:
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (major, minor)


def choose_backend(f: EnvFacts) -> BackendInfo:
    """Pick the first usable backend in order torch, cuda-runtime, cupti; say why not the others."""
    reasons: Dict[str, str] = {}
    chosen: Optional[str] = None
    if f.torch_version is None:
        for b in BACKENDS:
            reasons[b] = "torch is not installed"
        return BackendInfo(None, reasons, False, f)
    if not f.cuda_available:
        for b in BACKENDS:
            reasons[b] = "no CUDA device (torch.cuda.is_available() is False)"
        return BackendInfo(None, reasons, False, f)
    if not _torch_at_least(f.torch_version, 2, 15):
        reasons[TORCH] = f"torch {f.torch_version} < 2.15 has no torch.cuda.graph_annotations"
    elif f.torch_native is None:
        reasons[TORCH] = "torch.cuda.graph_annotations is missing"
    elif f.torch_missing:
        reasons[TORCH] = (f"torch {f.torch_version}'s graph annotations lack {', '.join(f.torch_missing)} "
                          "(looked in torch.cuda.graph_annotations and torch.cuda._graph_annotations, "
                          "where torch 2.15 has them)")
    elif not f.torch_native:
        reasons[TORCH] = "torch.cuda.graph_annotations.is_available() is False (needs driver >= 13.1 and cuda-bindings >= 13.1)"
    else:
        chosen = TORCH
    drv = f"driver {f.driver_version // 1000}.{f.driver_version % 1000 // 10}" if f.driver_version else "driver version unknown"
    if not f.cuda_bindings:
        reasons[CUDA_RUNTIME] = reasons[CUPTI] = "cuda-bindings is not installed"
    else:
        if f.driver_version is None or f.driver_version < TOOLS_ID_DRIVER:
            reasons[CUDA_RUNTIME] = f"{drv} < 13.1: cudaGraphNodeGetLocalId / cudaGraphExecGetId return cudaErrorCallRequiresNewerDriver"
        elif not f.runtime_ids:
            reasons[CUDA_RUNTIME] = "cuda-bindings lacks cudaGraphNodeGetLocalId / cudaGraphExecGetId (needs >= 13.1)"
        elif chosen is None:
            chosen = CUDA_RUNTIME
        if f.libcupti is None:
            reasons[CUPTI] = "libcupti not found (pip install nvidia-cuda-cupti)"
        elif chosen is None:
            chosen = CUPTI
    for b in BACKENDS:
        if b == chosen:
            reasons[b] = "chosen"
        else:
            reasons.setdefault(b, f"not needed: {chosen} is preferred")
    calibration = chosen in (CUDA_RUNTIME, CUPTI) and f.cupti_python
    return BackendInfo(chosen, reasons, calibration, f)


def probe_facts() -> EnvFacts:
    """Read :class:`EnvFacts` from this machine (imports torch and cuda-bindings if present)."""
    try:
        import torch
    except Exception:
        return EnvFacts()
    kw: Dict[str, Any] = {"torch_version": torch.__version__, "cuda_available": bool(torch.cuda.is_available())}
    if _torch_at_least(kw["torch_version"], 2, 15):
        from . import torch_native

        kw["torch_native"], kw["torch_missing"] = torch_native.probe()
    try:
        from cuda.bindings import runtime as rt

        kw["cuda_bindings"] = True
        kw["runtime_ids"] = hasattr(rt, "cudaGraphNodeGetLocalId") and hasattr(rt, "cudaGraphExecGetId")
        if kw["cuda_available"]:
            err, v = rt.cudaDriverGetVersion()
            if int(err) == 0:
                kw["driver_version"] = int(v)
    except Exception:
        pass
    if kw["cuda_available"]:
        torch.cuda.init()
        kw["libcupti"] = find_libcupti()
    with contextlib.suppress(Exception):
        import importlib.util

        kw["cupti_python"] = importlib.util.find_spec("cupti") is not None
    return EnvFacts(**kw)


_lock = threading.Lock()
_info: Optional[BackendInfo] = None
_instance: Optional[CaptureBackend] = None
_override: List[CaptureBackend] = []


def backend_info() -> Dict[str, Any]:
    """Which backend captures here and why the others were not used (probed once, cached)."""
    return _get_info().as_dict()


def _get_info() -> BackendInfo:
    global _info
    with _lock:
        if _info is None:
            _info = choose_backend(probe_facts())
        return _info


def is_available() -> bool:
    """True when some backend can annotate captures on this machine."""
    return bool(_override) or _get_info().backend is not None


def selected_name() -> Optional[str]:
    if _override:
        return _override[-1].name
    info = _info  # after the first probe no lock is needed: it never changes
    return (info or _get_info()).backend


def active() -> Optional[CaptureBackend]:
    """The backend instance capture uses (None: none usable, or torch's native one)."""
    global _instance
    if _override:
        return _override[-1]
    if _instance is not None:  # built once, never replaced: no lock needed to read it
        return _instance
    info = _get_info()
    if info.backend in (None, TORCH):
        return None
    with _lock:
        if _instance is None:
            _instance = RuntimeIdsBackend() if info.backend == CUDA_RUNTIME else CuptiBackend(info.facts.libcupti)
        return _instance


@contextlib.contextmanager
def use(backend: CaptureBackend) -> Iterator[CaptureBackend]:
    """Use ``backend`` instead of the probed one (tests, or forcing ``CuptiBackend``)."""
    _override.append(backend)
    try:
        yield backend
    finally:
        _override.remove(backend)
