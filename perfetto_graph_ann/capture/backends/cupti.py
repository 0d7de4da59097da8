"""The cupti backend: node and graph ids from libcupti (drivers older than 13.1)."""
from __future__ import annotations

import ctypes
from typing import Any, Optional, Tuple

from ...errors import CaptureError
from ..libcupti import find_libcupti  # noqa: F401 (re-exported)
from .. import fastpath
from .base import CUPTI
from .driver import CudaGraphBackend, _address

__all__ = ["CuptiBackend", "find_libcupti"]


def _out(fn: Any, handle: Any, ctype: Any, what: str) -> int:
    """``fn(handle, &out)``, a CUPTI call that writes one integer; raises naming ``what``."""
    v = ctype()
    rc = fn(int(handle), ctypes.byref(v))
    if rc != 0:
        raise CaptureError(f"{what} failed with CUPTI error {rc}")
    return v.value


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
        self._node_id_addr = self._marker_addrs[1]
        try:
            self._watch_addrs: Optional[Tuple[int, int, int]] = (
                _address(self._lib.cuptiSubscribe), _address(self._lib.cuptiEnableCallback),
                _address(self._lib.cuptiUnsubscribe))
        except AttributeError:
            self._watch_addrs = None
        try:
            self._detach_addrs: Optional[Tuple[int, int, int, int, int]] = (
                _address(self._lib.cuptiSubscribe), _address(self._lib.cuptiEnableDomain),
                _address(self._lib.cuptiUnsubscribe), _address(self._lib.cuptiFinalize),
                _address(self._cu.cuCtxGetCurrent))
        except AttributeError:
            self._detach_addrs = None

    def marker_functions(self) -> Optional[Tuple[int, int]]:
        return self._marker_addrs

    def node_watch_functions(self) -> Optional[Tuple[int, int, int]]:
        return self._watch_addrs

    def cupti_detach_functions(self) -> Optional[Tuple[int, int, int, int, int]]:
        return self._detach_addrs

    def _node_id(self, node: Any) -> int:
        return _out(self._lib.cuptiGetGraphNodeId, node, ctypes.c_uint64, "cuptiGetGraphNodeId")

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
        return _out(self._lib.cuptiGetGraphExecId, graph_exec, ctypes.c_uint32, "cuptiGetGraphExecId")
