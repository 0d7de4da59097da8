"""The interface every capture backend implements, and the backend names."""
from __future__ import annotations

from typing import Any, ContextManager, List, Optional, Tuple

from ...annotations.model import node_type_name  # noqa: F401 (re-exported)
from ...errors import CaptureError
from ..resolve import NodeInfo

__all__ = ["BACKENDS", "CaptureBackend", "CUDA_RUNTIME", "CUPTI", "node_type_name", "TOOLS_ID_DRIVER", "TORCH"]

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

        With it the compiled recorder (:mod:`..fastpath`) counts at scope edges without
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

    def node_watch_functions(self) -> Optional[Tuple[int, int, int]]:
        """Addresses of ``cuptiSubscribe``, ``cuptiEnableCallback`` and ``cuptiUnsubscribe``, or
        None. With them the compiled path counts nodes in CUPTI's node-created callback while a
        graph is captured (:mod:`..nodewatch`), and scope edges ask the driver nothing."""
        return None

    def cupti_detach_functions(self) -> Optional[Tuple[int, int, int, int, int]]:
        """Addresses of ``cuptiSubscribe``, ``cuptiEnableDomain``, ``cuptiUnsubscribe``,
        ``cuptiFinalize`` and a driver call taking one out pointer (``cuCtxGetCurrent``), or None:
        what :meth:`..nodewatch.NodeWatch.detach` needs to detach CUPTI from the process at a
        driver API exit call site (an initialised CUPTI slows every graph launch). A backend
        that gives them reads ids from CUPTI, so its captures initialise CUPTI."""
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

    def raw_table(self, graph: int) -> Optional[Any]:
        """``graph``'s node table as read at the end of the capture, still undecoded, or None.

        Where the backend can read the table this cheaply (in C, no copy of the graph), the
        session keeps this instead of a :meth:`clone_graph` copy and decodes it on first use
        (:meth:`decode_table`). None: no such reader here.
        """
        return None

    def decode_table(self, raw: Any) -> List[NodeInfo]:
        """The rows of a :meth:`raw_table` as :meth:`node_infos` gives them."""
        raise NotImplementedError

    def edges(self, graph: int) -> Optional[List[Tuple[int, int, int, int]]]:
        """``graph``'s dependency edges as (from node handle, to node handle, edge type, from
        port), or None where this backend cannot read them (the record then has no edges)."""
        return None

    def raw_edges(self, graph: int) -> Optional[Any]:
        """:meth:`edges` as read at the end of a capture, still undecoded (the session
        decodes it with :meth:`decode_edges` on first use, off the capture's path)."""
        return self.edges(graph)

    def decode_edges(self, raw: Any) -> List[Tuple[int, int, int, int]]:
        """The edges of a :meth:`raw_edges` record, as :meth:`edges` gives them."""
        return list(raw)

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
        ``collected`` (:class:`~..resolve.ActivityRecord`); raising on entry means it could
        not start (nothing was recorded, nothing replayed)."""
        raise CaptureError(self.calibration_unavailable() or "no activity session")


