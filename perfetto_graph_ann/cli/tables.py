"""The CLI's human-readable tables: :mod:`perfetto_graph_ann.util.tables` (shared with the
demo), plus the trace start the relative timestamps count from."""
from __future__ import annotations

from typing import Optional

from ..util.tables import (GAP, KEY_COLUMNS, MIN_TEXT_WIDTH, format_cell, format_duration, format_float,  # noqa: F401
                           format_ratio, header, is_duration, is_ratio, is_timestamp, render, shorten_around,
                           shorten_column, shorten_middle, terminal_width)

__all__ = ["format_cell", "format_duration", "format_float", "format_ratio", "GAP", "header", "is_duration", "is_ratio",
           "is_timestamp", "KEY_COLUMNS", "MIN_TEXT_WIDTH", "render", "shorten_around", "shorten_column",
           "shorten_middle", "terminal_width", "trace_start_ns"]


def trace_start_ns(session) -> Optional[int]:
    """The trace's first timestamp (``trace_bounds.start_ts``), or None where unknown."""
    from ..errors import GraphAnnError

    try:
        rows = session.query("SELECT start_ts FROM trace_bounds").tuples()
    except GraphAnnError:  # only means absolute timestamps
        return None
    return int(rows[0][0]) if rows and rows[0][0] is not None else None
