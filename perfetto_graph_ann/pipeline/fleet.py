"""``query_many`` and ``fleet_report`` as the package exports them: the query stage's
many-trace runners, given the pipeline's converter so a torch.profiler JSON trace (with
its sidecars) is joined and converted on the worker.

Same parameters as :func:`perfetto_graph_ann.query.batch.query_many` and
:func:`perfetto_graph_ann.query.fleet.fleet_report`, less ``converter``.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, TypeVar

from ..query import batch as _batch
from ..query import fleet as _fleet
from .query import convert_for_task

__all__ = ["fleet_report", "query_many"]

F = TypeVar("F", bound=Callable[..., Any])


def _with_converter(fn: F) -> F:
    """``fn`` with ``converter=convert_for_task``; named and documented as ``fn``, its
    signature without ``converter``."""

    @functools.wraps(fn, assigned=("__name__", "__qualname__", "__doc__"))
    def run(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, converter=convert_for_task, **kwargs)

    sig = inspect.signature(fn)
    run.__signature__ = sig.replace(parameters=[p for n, p in sig.parameters.items() if n != "converter"])  # type: ignore[attr-defined]
    return run  # type: ignore[return-value]


query_many = _with_converter(_batch.query_many)
fleet_report = _with_converter(_fleet.fleet_report)
