"""Read stage: torch.profiler (Kineto) Chrome JSON into the exact event model."""
from .model import GPU_WORK_CATEGORIES, GRAPH_LAUNCH_NAMES, KinetoTrace, TraceEvent

__all__ = ["GPU_WORK_CATEGORIES", "GRAPH_LAUNCH_NAMES", "KinetoTrace", "TraceEvent"]
