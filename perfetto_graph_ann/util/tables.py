"""Human-readable tables: every table the CLI prints (``lanes``, ``sql``, ``report``, ``fleet``)
and the demo's, in one style (``cli/tables.py`` re-exports it).

The SQL tables hold exact raw values (integer ns, absolute trace timestamps, ratios as
fractions); ``--format csv|json`` prints those. The default table view is for reading:

- durations (a column named ``dur`` or ``*_dur``) in ns / µs / ms / s, 3 significant digits;
- timestamps (``ts`` or ``*_ts``) as ``+<duration>`` from the trace start;
- ratios (``utilization``, ``*_utilization``, ``share``, ``*_fraction``) as percentages;
- other floats to 4 significant digits, integers and text as they are, NULL as ``-`` (``sql``: ``NULL``);
- long text (kernel names are kilobytes of C++ templates) shortened in the middle, so its
  start and its end (the template arguments that tell instantiations apart) both show; where
  two different values would still read the same (``...tilesize64x64x8...`` and
  ``...tilesize128x64x8...``), the part where they differ is kept as well;
- the table uses the terminal width: text is shortened only as far as the width needs, then
  the columns that still do not fit go to following blocks, each starting again with the
  columns that identify a row (:data:`KEY_COLUMNS`: device, lane, scope, ...).
"""
from __future__ import annotations

import math
import shutil
from typing import List, Optional, Sequence

__all__ = ["format_cell", "format_duration", "format_float", "format_ratio", "GAP", "header", "is_duration", "is_ratio",
           "is_timestamp", "KEY_COLUMNS", "MIN_TEXT_WIDTH", "render", "shorten_around", "shorten_column",
           "shorten_middle", "terminal_width"]

#: Minimum width a text column is shrunk to before columns move to another block.
MIN_TEXT_WIDTH = 24
GAP = "  "
#: Columns that identify a row, in the order they are repeated at the start of each block of
#: a table too wide for the terminal (the first column when a table has none of them).
KEY_COLUMNS = ("group", "group_name", "label", "process", "rank", "device", "lane_id", "replay_index",
               "graph_name", "scope_path", "pg", "seq")

_RATIO_NAMES = ("utilization", "share", "fraction")


def terminal_width(default: int = 100) -> int:
    """Columns of the terminal (``$COLUMNS`` wins), else ``default``."""
    return max(40, shutil.get_terminal_size((default, 24)).columns)


def is_duration(column: str) -> bool:
    return column == "dur" or column.endswith("_dur")


def is_timestamp(column: str) -> bool:
    return column == "ts" or column.endswith("_ts")


def is_ratio(column: str) -> bool:
    return column in _RATIO_NAMES or column.endswith(tuple("_" + n for n in _RATIO_NAMES))


def _null(v) -> bool:
    if v is None:
        return True
    try:
        import pandas as pd

        return v is pd.NA or v is pd.NaT or (isinstance(v, float) and math.isnan(v))
    except ImportError:  # pragma: no cover - pandas is a core dependency
        return isinstance(v, float) and math.isnan(v)


def _num(v) -> Optional[float]:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def format_duration(ns) -> str:
    """Nanoseconds as ``850 ns``, ``12.3 µs``, ``4.56 ms`` or ``1.23 s`` (3 significant digits)."""
    x = _num(ns)
    if x is None:
        return str(ns)
    a = abs(x)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if a >= scale:
            return f"{_sig(x / scale, 3)} {unit}"
    return f"{x:.0f} ns" if float(x).is_integer() else f"{_sig(x, 3)} ns"


def _sig(x: float, digits: int) -> str:
    """``x`` with ``digits`` significant digits, no exponent, trailing zeros kept to the digit count."""
    if x == 0:
        return "0"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(x)))))
    return f"{x:.{decimals}f}"


def format_ratio(v) -> str:
    x = _num(v)
    return str(v) if x is None else f"{100 * x:.1f}%"


def format_float(v) -> str:
    x = float(v)
    if x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return _sig(x, 4) if 1e-4 <= abs(x) < 1e15 else f"{x:.4g}"


def shorten_middle(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters by replacing its middle with ``…``."""
    if len(text) <= width:
        return text
    if width <= 1:
        return text[:width]
    head = width // 2
    tail = width - 1 - head
    return text[:head] + "…" + (text[-tail:] if tail else "")


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def shorten_around(text: str, width: int, lo: int, hi: int) -> str:
    """``text`` in ``width`` characters keeping ``text[lo:hi]`` (where it differs from similar
    values) visible: its start, ``…``, a window around ``lo``, ``…``, its end."""
    if len(text) <= width:
        return text
    if width < 9:
        return shorten_middle(text, width)
    hi = max(hi, lo + 1)
    budget = width - 2  # two ellipses
    head = min(lo, max(1, budget // 5))
    tail = min(len(text) - hi, max(1, budget // 5))
    window = budget - head - tail
    start = max(head, lo - max(1, window // 4))  # a little context before the first difference
    end = min(len(text) - tail, start + window)
    start = max(head, end - window)
    parts = [text[:head], "…" if start > head else text[head:start], text[start:end],
             "…" if end < len(text) - tail else text[end:len(text) - tail], text[len(text) - tail:]]
    out = "".join(parts)
    return out if len(out) <= width else shorten_middle(text, width)


def shorten_column(values: Sequence[str], width: int) -> List[str]:
    """Each value in ``width`` characters (:func:`shorten_middle`), except that values which
    would then read the same although they differ keep the part where they differ
    (:func:`shorten_around`): two GEMMs that differ only by a tile size stay apart."""
    out = [shorten_middle(v, width) for v in values]
    groups: dict = {}
    for v, o in zip(values, out):
        groups.setdefault(o, set()).add(v)
    fixed: dict = {}
    for originals in groups.values():
        if len(originals) < 2:
            continue
        for v in originals:
            others = [w for w in originals if w != v]
            lo = max(_common_prefix(v, w) for w in others)
            hi = len(v) - max(_common_prefix(v[::-1], w[::-1]) for w in others)
            fixed[v] = shorten_around(v, width, lo, hi)
    return [fixed.get(v, o) for v, o in zip(values, out)]


def format_cell(column: str, v, trace_start: Optional[int] = None, null: str = "-") -> str:
    """One value as the table shows it (see the module doc); ``null`` for NULL."""
    if _null(v):
        return null
    if isinstance(v, bool):
        return "yes" if v else "no"
    if is_duration(column) and _num(v) is not None:
        return format_duration(v)
    if is_timestamp(column) and _num(v) is not None:
        if trace_start is None:
            return str(v)
        return "+" + format_duration(float(v) - trace_start) if float(v) >= trace_start else \
            "-" + format_duration(trace_start - float(v))
    if is_ratio(column) and _num(v) is not None:
        return format_ratio(v)
    if isinstance(v, float):
        return format_float(v)
    try:
        import numpy as np

        if isinstance(v, np.floating):
            return format_float(float(v))
    except ImportError:  # pragma: no cover
        pass
    return " ".join(str(v).split()) if isinstance(v, str) else str(v)


def header(column: str, trace_start: Optional[int]) -> str:
    """Column title; timestamps say they are relative."""
    if is_timestamp(column) and trace_start is not None:
        return f"{column} (from start)"
    return column


def render(df, trace_start: Optional[int] = None, width: Optional[int] = None, columns: Optional[Sequence[str]] = None,
           count: bool = False, null: str = "-", keys: Optional[Sequence[str]] = None,
           durations: Sequence[str] = ()) -> str:
    """``df`` as an aligned text table fitting ``width`` columns (ends with a newline).

    ``trace_start``: ns of the trace start (``trace_bounds.start_ts``) for relative
    timestamps; None prints them raw. ``columns``: which columns and in what order (default:
    all). ``count``: add a ``(N rows)`` line. ``null``: how NULL reads. ``keys``: the columns
    repeated at the start of every block when the table is cut into blocks (default: those
    of :data:`KEY_COLUMNS` it has, else its first column). ``durations``: more columns to
    show as durations (ns) besides those named ``dur`` / ``*_dur``.
    """
    width = width or terminal_width()
    cols = [c for c in (columns or list(df.columns)) if c in df.columns]
    extra = set(durations)
    titles = [header(str(c), trace_start) for c in cols]
    cells = [[format_cell("dur" if c in extra else str(c), v, trace_start, null) for c, v in zip(cols, row)]
             for row in df[cols].itertuples(index=False, name=None)]
    text_col = [c not in extra and not _numeric_column(df[c], str(c)) for c in cols]
    widths = [max([len(t)] + [len(r[i]) for r in cells]) for i, t in enumerate(titles)]
    key_idx = sorted(cols.index(k) for k in (keys if keys is not None else KEY_COLUMNS) if k in cols) or \
        ([0] if cols else [])

    def total(ws: List[int]) -> int:
        return sum(ws) + len(GAP) * (len(ws) - 1)

    # shorten the widest text columns until the table fits (or they reach MIN_TEXT_WIDTH)
    while total(widths) > width:
        shrinkable = [i for i, txt in enumerate(text_col) if txt and widths[i] > max(MIN_TEXT_WIDTH, len(titles[i]))]
        if not shrinkable:
            break
        i = max(shrinkable, key=lambda k: widths[k])
        widths[i] = max(MIN_TEXT_WIDTH, len(titles[i]), widths[i] - (total(widths) - width))
    natural = [max([len(t)] + [len(r[i]) for r in cells]) for i, t in enumerate(titles)]
    blocks = _blocks(widths, width, key_idx)
    if len(blocks) > 1:  # each block has the whole width: give its text columns back what it has spare
        for block in blocks:
            spare = width - total([widths[i] for i in block])
            for i in sorted((i for i in block if text_col[i] and i not in key_idx and widths[i] < natural[i]),
                            key=lambda k: natural[k] - widths[k]):
                grow = min(spare, natural[i] - widths[i])
                widths[i] += grow
                spare -= grow
    for i, txt in enumerate(text_col):
        if txt:
            column = shorten_column([r[i] for r in cells], widths[i])
            for r, v in zip(cells, column):
                r[i] = v
    out: List[str] = []
    for n, block in enumerate(blocks):
        if n:
            out.append("")

        def line(values: Sequence[str]) -> str:
            parts = [values[i].ljust(widths[i]) if text_col[i] else values[i].rjust(widths[i]) for i in block]
            return GAP.join(parts).rstrip()
        out.append(line(titles))
        out.append(line(["-" * w for w in widths]))
        out.extend(line(r) for r in cells)
    if count:
        out.append(f"({len(cells)} row{'s' if len(cells) != 1 else ''})")
    return "\n".join(out) + "\n"


def _blocks(widths: List[int], width: int, keys: Sequence[int] = (0,)) -> List[List[int]]:
    """Column indexes per printed block: as many as fit; every block after the first starts
    with the ``keys`` columns (as many of them as leave room for one more column)."""
    blocks: List[List[int]] = []
    current: List[int] = []
    used = 0
    for i, w in enumerate(widths):
        add = w + (len(GAP) if current else 0)
        if current and used + add > width:
            blocks.append(current)
            repeat = [k for k in keys if k < i]
            while repeat and sum(widths[k] + len(GAP) for k in repeat) + w > width:
                repeat.pop()
            current = list(repeat)
            used = sum(widths[k] for k in repeat) + len(GAP) * max(0, len(repeat) - 1)
            add = w + (len(GAP) if current else 0)
        current.append(i)
        used += add
    if current:
        blocks.append(current)
    return blocks


def _numeric_column(series, column: str) -> bool:
    import pandas as pd

    if is_duration(column) or is_timestamp(column) or is_ratio(column):
        return True
    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)
