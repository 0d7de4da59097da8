"""``pga.metrics``: the ``graph_ann`` SQL tables as pandas DataFrames, one function per table.

Each takes a trace (a path, opened and closed for the call, or an open session from
``pga.open_trace``, reused) and ``engine``; times are integer nanoseconds, ratios fractions.

    import perfetto_graph_ann as pga
    with pga.open_trace("run.pftrace") as s:
        lanes = pga.metrics.lanes(s)
        slow = pga.metrics.slowest_scopes(s, top=10)

The numbers are the SQL's (:mod:`perfetto_graph_ann.query.metrics` selects the tables); the
names here are the public ones. The flat names of earlier releases (``pga.lane_summary``,
``pga.graph_replays``, ...) still work for one release, with a ``DeprecationWarning``.
"""
from __future__ import annotations

from .query.metrics import (collectives, critical_path, critical_path_items, critical_path_lanes, critical_path_scopes,
                            critical_path_summary, gpu_work, groups, overlap, replay_lanes, replays, report)
from .query.metrics import lane_gaps as gaps
from .query.metrics import lane_idle as idle
from .query.metrics import lane_summary as lanes
from .query.metrics import lane_top_kernels as top_kernels
from .query.metrics import module_instances, module_kinds, scope_instances
from .query.metrics import module_summary as modules
from .query.metrics import scope_slowest as slowest_scopes
from .query.metrics import scope_summary as scopes

__all__ = ["collectives", "critical_path", "critical_path_items", "critical_path_lanes", "critical_path_scopes",
           "critical_path_summary", "gaps", "gpu_work", "groups", "idle", "lanes", "module_instances", "module_kinds",
           "modules", "overlap", "replay_lanes", "replays", "report", "scope_instances", "scopes", "slowest_scopes",
           "top_kernels"]
