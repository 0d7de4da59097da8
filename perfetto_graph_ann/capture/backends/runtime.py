"""The cuda-runtime backend: node local ids and exec graph ids from the runtime (driver >= 13.1)."""
from __future__ import annotations

import contextlib
from typing import Any, Optional

from .base import CUDA_RUNTIME
from .driver import CudaGraphBackend, _check

__all__ = ["RuntimeIdsBackend"]


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
