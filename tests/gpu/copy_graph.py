"""The small graph of the copy checks (tests/gpu/test_copy_nodes_gpu.py,
benchmarks/gpu/record_cold_copy.py): ``x * 2`` (scope ``scale``), a device-to-device copy into
``buf`` (scope ``copy``), then ``zero_`` and ``+ 1`` (scope ``fill``); four GPU nodes."""
from __future__ import annotations

from typing import Any

import perfetto_graph_ann as pga

#: each GPU event's scope, in the capture's order
SCOPES = ["scale", "copy", "fill", "fill"]


def scale_copy_fill(x: Any, buf: Any) -> Any:
    """The graph's body, to run inside a capture; returns its output (all ones)."""
    with pga.mark_kernels({"name": "scale"}):
        y = x * 2
    with pga.mark_kernels({"name": "copy"}):
        buf.copy_(y)
    with pga.mark_kernels({"name": "fill"}):
        buf.zero_()
        return buf + 1
