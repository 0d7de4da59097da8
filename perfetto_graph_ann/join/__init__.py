"""Join stage: replayed GPU events x capture annotations -> lanes and args (:class:`LaneLayout`).

``join(trace, annotations, graph_lanes="all")`` is the entry point; each strategy
(exact, calibrated, structural) lives in its own module.
"""
from .join import join
from .model import JoinReport, LaneLayout, Placement

__all__ = ["join", "JoinReport", "LaneLayout", "Placement"]
